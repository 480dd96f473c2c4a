// @vitest-environment jsdom
import { describe, expect, it } from 'vitest';

import { SpmdSection, collectiveSummary, formatShare, readSpmdUsage } from '../src/devicememory';
import { readSnapshot } from '../src/protocol';

/** The snapshot's `spmd` object after three runs of a column-sharded matmul on 8 devices. */
const SPMD = {
  devices: [
    ['xla:0', 1573124],
    ['xla:1', 1573024],
    ['xla:2', 786512],
    ['xla:3', 0],
    ['xla:4', 'lots'],
    [5, 3]
  ],
  runs: 3,
  collectives: {
    'all-gather': { count: 3, bytes: 3145728 },
    'all-to-all': { count: 3, bytes: 393216 },
    bad: 7
  },
  collective_bytes: 3538944,
  bytes_accessed: 19578896,
  share: 0.18075
};

describe('the SPMD section of the panel', () => {
  it('reads the snapshot object, dropping what is malformed', () => {
    const usage = readSpmdUsage(SPMD)!;
    expect(usage.devices).toEqual([
      ['xla:0', 1573124],
      ['xla:1', 1573024],
      ['xla:2', 786512],
      ['xla:3', 0],
      ['xla:4', 0]
    ]);
    expect(Object.keys(usage.collectives)).toEqual(['all-gather', 'all-to-all']);
    expect(usage.share).toBeCloseTo(0.18075);
    expect(readSpmdUsage(null)).toBeNull();
    expect(readSnapshot({ spmd: SPMD }).spmd?.runs).toBe(3);
    expect(readSnapshot({}).spmd).toBeNull(); // outside SPMD mode
  });

  it('says the share in words', () => {
    expect(formatShare(0.18075)).toBe('18%');
    expect(formatShare(0.043)).toBe('4.3%');
    expect(formatShare(0.0004)).toBe('<0.1%');
    expect(collectiveSummary(readSpmdUsage(SPMD)!)).toBe(
      '18% of the bytes the programs moved: 3.5 MB of 20 MB per device over 3 runs.'
    );
    expect(collectiveSummary(readSpmdUsage({ ...SPMD, runs: 0 })!)).toBe(
      'No SPMD program has run since the last clear.'
    );
  });

  it('draws a bar per device, scaled to the fullest, and the collectives by kind', () => {
    const section = new SpmdSection();
    section.update(null);
    expect(section.node.classList.contains('xlalab-mod-hidden')).toBe(true);
    section.update(readSpmdUsage(SPMD));
    expect(section.node.classList.contains('xlalab-mod-hidden')).toBe(false);
    const rows = [...section.node.querySelectorAll('[data-testid="xlalab-device-memory"] tr')];
    expect(rows.map(r => r.getAttribute('data-device'))).toEqual([
      'xla:0',
      'xla:1',
      'xla:2',
      'xla:3',
      'xla:4'
    ]);
    const widths = rows.map(r => (r.querySelector('.xlalab-DeviceBar') as HTMLElement).style.width);
    expect(widths).toEqual(['100%', '100%', '50%', '0%', '0%']);
    expect(rows[0].textContent).toBe('xla:01.6 MB');
    const kinds = [...section.node.querySelectorAll('[data-testid="xlalab-collective-kinds"] li')];
    expect(kinds.map(k => k.textContent)).toEqual(['all-gather × 3, 3.1 MB', 'all-to-all × 3, 393 KB']);
    expect(section.node.querySelector('[data-testid="xlalab-collective-share"]')?.textContent).toContain(
      '18% of the bytes'
    );
  });
});
