/**
 * The panel's SPMD section: the live data on each device, and the collectives XLA's
 * partitioner put into the programs that ran, with their share of the bytes those
 * programs move (the snapshot's `spmd` object, docs/lab-protocol.md; null outside SPMD).
 */
import { h, replaceChildren, setText } from './dom';
import { countOf, formatBytes, formatCount } from './format';

export interface SpmdUsage {
  /** [device, bytes of live data it holds], in device order */
  devices: [string, number][];
  /** runs of SPMD programs since the last clear (those whose cost is known) */
  runs: number;
  /** collective kind -> how many ran and the bytes of their results, per device */
  collectives: Record<string, { count: number; bytes: number }>;
  collective_bytes: number;
  /** the bytes the programs read and wrote per device (XLA's cost analysis), over the runs */
  bytes_accessed: number;
  /** collective_bytes / bytes_accessed (null: nothing known yet) */
  share: number | null;
}

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function count(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : 0;
}

/** The snapshot's `spmd` object, or null (outside SPMD mode, or malformed). */
export function readSpmdUsage(value: unknown): SpmdUsage | null {
  if (!isObject(value)) {
    return null;
  }
  const devices: [string, number][] = [];
  if (Array.isArray(value.devices)) {
    for (const pair of value.devices) {
      if (Array.isArray(pair) && typeof pair[0] === 'string') {
        devices.push([pair[0], count(pair[1])]);
      }
    }
  }
  const collectives: SpmdUsage['collectives'] = Object.create(null);
  if (isObject(value.collectives)) {
    for (const [kind, entry] of Object.entries(value.collectives)) {
      if (isObject(entry)) {
        collectives[kind] = { count: count(entry.count), bytes: count(entry.bytes) };
      }
    }
  }
  const share = typeof value.share === 'number' && Number.isFinite(value.share) ? value.share : null;
  return {
    devices,
    runs: count(value.runs),
    collectives,
    collective_bytes: count(value.collective_bytes),
    bytes_accessed: count(value.bytes_accessed),
    share
  };
}

/** A share as a percentage: "18%", "0.4%", "<0.1%". */
export function formatShare(share: number): string {
  const percent = share * 100;
  if (percent > 0 && percent < 0.1) {
    return '<0.1%';
  }
  return percent < 10 ? `${percent.toFixed(1).replace(/\.0$/, '')}%` : `${Math.round(percent)}%`;
}

/** The sentence about the collectives' share, for the runs counted. */
export function collectiveSummary(usage: SpmdUsage): string {
  if (!usage.runs) {
    return 'No SPMD program has run since the last clear.';
  }
  const runs = countOf(usage.runs, 'run');
  if (usage.share === null) {
    return `${formatBytes(usage.collective_bytes)} of collectives per device over ${runs}.`;
  }
  return (
    `${formatShare(usage.share)} of the bytes the programs moved: ` +
    `${formatBytes(usage.collective_bytes)} of ${formatBytes(usage.bytes_accessed)} per device over ${runs}.`
  );
}

function testId(id: string): Record<string, string> {
  return { 'data-testid': id };
}

/** The section; `update` rewrites it from a snapshot (hidden while `spmd` is null). */
export class SpmdSection {
  readonly node = h('section', {
    class: 'xlalab-Section xlalab-mod-hidden',
    attrs: testId('xlalab-spmd')
  });
  private readonly _memory = h('table', { class: 'xlalab-Table', attrs: testId('xlalab-device-memory') });
  private readonly _share = h('div', {
    class: 'xlalab-SpmdShare',
    attrs: { ...testId('xlalab-collective-share'), style: 'margin:2px 0' }
  });
  private readonly _kinds = h('ul', {
    class: 'xlalab-FallbackList',
    attrs: testId('xlalab-collective-kinds')
  });

  constructor() {
    replaceChildren(
      this.node,
      h('h3', {}, 'SPMD'),
      h('div', { class: 'xlalab-Stat-label' }, 'Live data per device'),
      this._memory,
      h('div', { class: 'xlalab-Stat-label' }, 'Collectives'),
      this._share,
      this._kinds
    );
  }

  update(usage: SpmdUsage | null): void {
    this.node.classList.toggle('xlalab-mod-hidden', usage === null);
    if (usage === null) {
      return;
    }
    const most = Math.max(1, ...usage.devices.map(([, bytes]) => bytes));
    replaceChildren(
      this._memory,
      ...usage.devices.map(([device, bytes]) =>
        h(
          'tr',
          { attrs: { 'data-device': device } },
          h('th', {}, device),
          h(
            'td',
            { attrs: { style: 'width:60%' } },
            h('span', {
              class: 'xlalab-DeviceBar',
              attrs: {
                style:
                  `display:inline-block;height:8px;width:${((100 * bytes) / most).toFixed(1)}%;` +
                  'background:var(--jp-brand-color1)'
              }
            })
          ),
          h('td', { class: 'xlalab-Num' }, formatBytes(bytes))
        )
      )
    );
    setText(this._share, collectiveSummary(usage));
    replaceChildren(
      this._kinds,
      ...Object.entries(usage.collectives).map(([kind, entry]) =>
        h(
          'li',
          { attrs: { 'data-kind': kind } },
          `${kind} × ${formatCount(entry.count)}, ${formatBytes(entry.bytes)}`
        )
      )
    );
  }
}
