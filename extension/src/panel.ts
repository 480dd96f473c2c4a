/**
 * The sidebar panel: live numbers, fallbacks, timeline and warnings of the active
 * notebook's kernel.
 *
 * The DOM is built once; each model change rewrites texts and rebuilds the lists.
 * Every piece of kernel text goes in through `h`/`setText` (text nodes only).
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { ActiveKernel } from './current';
import { SpmdSection } from './devicememory';
import { h, replaceChildren, setText } from './dom';
import { countOf, formatBytes, formatCount, formatElapsed, formatSeconds, shortHash } from './format';
import { KernelModel } from './model';
import { SourceLocation } from './protocol';
import { runtimeRows } from './runtimeinfo';
import { LEGEND, layoutTimeline, renderTimeline } from './timeline';
import { renderWarnings } from './warninglist';

export const PANEL_ID = 'xlalab-panel';

/** What the panel asks its host to do; index.ts wires these to JupyterLab. */
export interface PanelActions {
  jumpTo(where: SourceLocation): void;
  openGraph(graphHash: string): void;
  /** opens two graphs side by side with their differences marked */
  compareGraphs(before: string, after: string, title: string): void;
}

/** The timeline's window choices: label -> seconds (null: every event kept). */
const TIMELINE_WINDOWS: [string, number | null][] = [
  ['last minute', 60],
  ['last 10 minutes', 600],
  ['last hour', 3600],
  ['all kept events', null]
];

/** How often the "compiling… N s" text and the growing bar are redrawn. */
const TICK_MS = 200;

function testId(id: string): Record<string, string> {
  return { 'data-testid': id };
}

/** A number cell of the stats grid: its element holds only the number (DOM contract). */
function stat(id: string): HTMLSpanElement {
  return h('span', { class: 'xlalab-Stat-value', attrs: testId(id) }, '0');
}

export class XlaPanel extends Widget {
  private _model: KernelModel | null = null;
  private _unsubscribe: (() => void) | null = null;
  private _ticker: ReturnType<typeof setInterval> | null = null;
  private _dirty = true;
  /** the model's warningsVersion the list shows (-1: none yet) */
  private _renderedWarnings = -1;

  private readonly _state = h('div', { class: 'xlalab-State', attrs: testId('xlalab-state') });
  private readonly _compilingSlot = h('div', { class: 'xlalab-CompilingSlot' });
  private readonly _body = h('div', { class: 'xlalab-Body' });
  private readonly _stats = {
    uncached: stat('xlalab-compiles-uncached'),
    cached: stat('xlalab-compiles-cached'),
    timeLast: stat('xlalab-compile-time-last'),
    timeTotal: stat('xlalab-compile-time-total'),
    executions: stat('xlalab-executions'),
    executeTime: stat('xlalab-execute-time'),
    transfersTo: stat('xlalab-transfers-to'),
    transfersFrom: stat('xlalab-transfers-from'),
    fallbacks: stat('xlalab-fallbacks'),
    dynamoGraphs: stat('xlalab-dynamo-graphs'),
    dynamoRecompiles: stat('xlalab-dynamo-recompiles')
  };
  /** compiled mode's graphs beside XLA's compiles; hidden until dynamo compiled something */
  private readonly _dynamoRow = h('div', { class: 'xlalab-Stat', attrs: { style: 'display: none' } });
  /** the sizes next to the transfer counts */
  private readonly _words = {
    bytesTo: h('span', { class: 'xlalab-Bytes', attrs: testId('xlalab-bytes-to') }),
    bytesFrom: h('span', { class: 'xlalab-Bytes', attrs: testId('xlalab-bytes-from') })
  };
  private readonly _runtime = h('table', {
    class: 'xlalab-Table xlalab-Runtime',
    attrs: testId('xlalab-runtime')
  });
  private _timelineWindow: number | null = null;
  /** the model's clears and generation when the report shown was asked for */
  private _reportAskedAt: [number, number] = [-1, -1];
  private readonly _transferRow = h('div', { class: 'xlalab-Stat' });
  private readonly _fallbackList = h('ul', { class: 'xlalab-FallbackList' });
  private readonly _timeline = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  private readonly _warningCount = h('span', { class: 'xlalab-Count' });
  private readonly _warnings = h('ul', { class: 'xlalab-Warnings', attrs: testId('xlalab-warnings') });
  private readonly _notice = h('div', { class: 'xlalab-Notice' });
  private readonly _reportText = h('pre', { class: 'xlalab-Report', attrs: testId('xlalab-report') });
  private readonly _report = h('section', { class: 'xlalab-Section xlalab-mod-hidden' });
  /** SPMD mode: live data per device and the collectives' share (hidden otherwise) */
  private readonly _spmd = new SpmdSection();

  constructor(
    private readonly _active: ActiveKernel,
    private readonly _actions: PanelActions
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('xlalab-Panel');
    this.title.caption = "XLA: what the notebook's kernel compiles, runs and transfers";
    this._timeline.setAttribute('data-testid', 'xlalab-timeline');
    this._timeline.setAttribute('class', 'xlalab-Timeline');
    this._buildDom();
    _active.changed.connect(this._follow, this);
    this._follow();
  }

  dispose(): void {
    this._detach();
    this._active.changed.disconnect(this._follow, this);
    super.dispose();
  }

  protected onAfterShow(_: Message): void {
    if (this._dirty) {
      this._render();
    }
  }

  // -------------------------------------------------------------------------

  private _buildDom(): void {
    const s = this._stats;
    const w = this._words;
    const row = (label: string, ...values: (Node | string)[]): HTMLElement =>
      h(
        'div',
        { class: 'xlalab-Stat' },
        h('span', { class: 'xlalab-Stat-label' }, label),
        h('span', {}, ...values)
      );
    replaceChildren(
      this._dynamoRow,
      h('span', { class: 'xlalab-Stat-label' }, 'Dynamo graphs'),
      h('span', {}, s.dynamoGraphs, ' compiled, ', s.dynamoRecompiles, ' recompiled')
    );
    this._dynamoRow.title =
      'torch.compile: graphs dynamo captured and handed to xlalab (each compiles to XLA programs ' +
      'counted above), and how many of them a failed guard caused';
    replaceChildren(
      this._transferRow,
      h('span', { class: 'xlalab-Stat-label' }, 'Transfers'),
      h(
        'span',
        {},
        s.transfersTo,
        ' to device (',
        w.bytesTo,
        '), ',
        s.transfersFrom,
        ' from device (',
        w.bytesFrom,
        ')'
      )
    );
    const button = (label: string, title: string, onClick: () => void, id?: string): HTMLButtonElement =>
      h(
        'button',
        {
          class: 'jp-Button xlalab-Button',
          attrs: { title, type: 'button', ...(id ? testId(id) : {}) },
          on: { click: onClick }
        },
        label
      );
    const windowSelect = h(
      'select',
      {
        class: 'xlalab-Select',
        attrs: {
          title: 'How much of the kept history the timeline shows',
          ...testId('xlalab-timeline-window')
        },
        on: {
          change: (event: Event) => {
            const value = (event.target as HTMLSelectElement).value;
            this._timelineWindow = value === 'all' ? null : Number(value);
            this._renderTimeline();
          }
        }
      },
      ...TIMELINE_WINDOWS.map(([label, seconds]) =>
        h('option', { attrs: { value: seconds === null ? 'all' : String(seconds) } }, label)
      )
    );
    windowSelect.value = 'all';
    const legend = h(
      'ul',
      { class: 'xlalab-Legend', attrs: testId('xlalab-timeline-legend') },
      ...LEGEND.map(entry =>
        h(
          'li',
          { attrs: { title: entry.title, 'data-kind': entry.kind } },
          h('span', { class: `xlalab-Legend-swatch xlalab-Timeline-${entry.kind}` }),
          entry.label
        )
      )
    );
    replaceChildren(
      this._report,
      h(
        'div',
        { class: 'xlalab-Section-head' },
        h('h3', {}, 'Metrics report'),
        button('Close', 'Hide the metrics report', () => this._hideReport())
      ),
      this._reportText
    );

    replaceChildren(
      this._body,
      h('section', { class: 'xlalab-Section' }, h('h3', {}, 'Kernel'), this._runtime),
      h(
        'section',
        { class: 'xlalab-Section' },
        h('h3', {}, 'Since the last clear'),
        row('Compiles', s.uncached, ' uncached, ', s.cached, ' cached'),
        this._dynamoRow,
        row('Compile time', s.timeLast, ' last, ', s.timeTotal, ' total'),
        row('Executions', s.executions, ' in ', s.executeTime),
        this._transferRow,
        row('CPU fallbacks', s.fallbacks)
      ),
      this._fallbackList,
      this._spmd.node,
      h(
        'section',
        { class: 'xlalab-Section' },
        h('div', { class: 'xlalab-Section-head' }, h('h3', {}, 'Timeline'), windowSelect),
        this._timeline,
        legend
      ),
      h('section', { class: 'xlalab-Section' }, h('h3', {}, 'Warnings ', this._warningCount), this._warnings),
      h(
        'div',
        { class: 'xlalab-Toolbar' },
        button('Refresh', 'Ask the kernel for a fresh snapshot', () => void this._request('snapshot')),
        button(
          'Metrics report',
          "Show torch_xla's metrics report",
          () => void this._showReport(),
          'xlalab-show-report'
        ),
        button(
          'Clear',
          'Clear counters, metrics and warnings in the kernel',
          () => void this._request('clear'),
          'xlalab-clear'
        )
      ),
      this._notice,
      this._report
    );
    replaceChildren(
      this.node,
      h('header', { class: 'xlalab-Header' }, h('h2', {}, 'XLA')),
      this._state,
      this._compilingSlot,
      this._body
    );
  }

  private _hideReport(): void {
    setText(this._reportText, '');
    this._report.classList.add('xlalab-mod-hidden');
  }

  /** Switches to the active notebook's model. */
  private _follow(): void {
    this._detach();
    this._model = this._active.bridge?.model ?? null;
    this._renderedWarnings = -1;
    if (this._model) {
      this._unsubscribe = this._model.subscribe(() => this._changed());
    }
    setText(this._notice, '');
    this._hideReport();
    this._changed();
  }

  private _detach(): void {
    this._unsubscribe?.();
    this._unsubscribe = null;
    this._stopTicker();
  }

  private _changed(): void {
    this._dirty = true;
    if (this.isVisible) {
      this._render();
    }
    // The ticker runs while compiling, visible or not, so it stops when the compile ends.
    if (this._model?.compiling) {
      this._startTicker();
    } else {
      this._stopTicker();
    }
  }

  private _startTicker(): void {
    if (this._ticker === null) {
      this._ticker = setInterval(() => {
        if (this.isVisible) {
          this._renderCompiling();
          this._renderTimeline();
        }
      }, TICK_MS);
    }
  }

  private _stopTicker(): void {
    if (this._ticker !== null) {
      clearInterval(this._ticker);
      this._ticker = null;
    }
  }

  // -------------------------------------------------------------------------
  // Rendering

  private _render(): void {
    this._dirty = false;
    const model = this._model;
    this._renderState();
    const connected = model?.status === 'connected';
    this._body.classList.toggle('xlalab-mod-hidden', !connected);
    this._renderCompiling();
    if (!model || !connected) {
      return;
    }
    // A clear (from this page or another) or a new kernel since the report was asked for:
    // what it says is stale.
    const [clears, generation] = this._reportAskedAt;
    if (model.clears !== clears || model.generation !== generation) {
      this._hideReport();
    }
    replaceChildren(
      this._runtime,
      ...runtimeRows(model.runtime, model.hello?.xlalab ?? '?').map(([label, value]) =>
        h('tr', {}, h('th', {}, label), h('td', {}, value))
      )
    );
    const snap = model.snapshot;
    const s = this._stats;
    setText(s.uncached, formatCount(snap.compiles.uncached));
    setText(s.cached, formatCount(snap.compiles.cached));
    setText(s.dynamoGraphs, formatCount(snap.dynamo.graphs));
    setText(s.dynamoRecompiles, formatCount(snap.dynamo.recompiles));
    // Inline: .xlalab-Stat's display rule would beat the hidden class.
    this._dynamoRow.style.display = snap.dynamo.graphs === 0 ? 'none' : '';
    setText(s.timeLast, formatSeconds(snap.compiles.seconds_last));
    setText(s.timeTotal, formatSeconds(snap.compiles.seconds_total));
    setText(s.executions, formatCount(snap.executions.count));
    setText(this._words.bytesTo, formatBytes(snap.transfers.bytes_to_device));
    setText(this._words.bytesFrom, formatBytes(snap.transfers.bytes_from_device));
    setText(s.executeTime, formatSeconds(snap.executions.seconds_total));
    setText(s.transfersTo, formatCount(snap.transfers.to_device));
    setText(s.transfersFrom, formatCount(snap.transfers.from_device));
    this._transferRow.title =
      `${countOf(snap.transfers.to_device, 'transfer')} to the device, ` +
      `${countOf(snap.transfers.from_device, 'transfer')} from it`;
    setText(s.fallbacks, formatCount(model.fallbackTotal()));
    this._spmd.update(snap.spmd);
    replaceChildren(
      this._fallbackList,
      ...model
        .fallbackList()
        .map(([op, count]) =>
          h(
            'li',
            { class: 'xlalab-FallbackOp', attrs: { 'data-testid': 'xlalab-fallback-op', 'data-op': op } },
            `${op} × ${formatCount(count)}`
          )
        )
    );
    this._renderTimeline();
    // Rebuilt only when they changed: a rebuild would drop keyboard focus on an item.
    if (model.warningsVersion !== this._renderedWarnings) {
      this._renderedWarnings = model.warningsVersion;
      const cards = model.warningCards();
      setText(this._warningCount, cards.length ? `(${cards.length})` : '');
      renderWarnings(this._warnings, cards, {
        jumpTo: where => this._actions.jumpTo(where),
        compare: card =>
          card.previous_graph_hash && card.graph_hash
            ? this._actions.compareGraphs(
                card.previous_graph_hash,
                card.graph_hash,
                `${card.title}: ${card.message}`
              )
            : undefined
      });
    }
  }

  private _renderState(): void {
    const model = this._model;
    const el = this._state;
    let text: string;
    let status: string = model?.status ?? 'no-kernel';
    if (!this._active.panel) {
      status = 'no-kernel';
      text = 'no kernel: open a notebook to see what its XLA device does.';
    } else if (!model) {
      status = 'no-kernel';
      text = this._active.panel.sessionContext.hasNoKernel
        ? 'no kernel: select a kernel for this notebook.'
        : 'no kernel yet: the notebook’s kernel is starting…';
    } else {
      switch (model.status) {
        case 'probing':
          text = 'checking the kernel for xlalab…';
          break;
        case 'not-enabled':
          replaceChildren(
            el,
            'xlalab is not enabled in this kernel. Run ',
            h('code', {}, '%load_ext xlalab'),
            ' in a cell to enable it.'
          );
          el.dataset.status = model.status;
          return;
        case 'connected': {
          const hello = model.hello;
          text = `connected: xlalab ${hello?.xlalab ?? '?'}`;
          if (hello?.pid) {
            text += ` in kernel pid ${hello.pid}`;
          }
          break;
        }
        case 'mismatch':
          text = model.mismatchMessage;
          break;
        case 'restarting':
          text = 'the kernel is restarting…';
          break;
        case 'dead':
          text = 'the kernel is dead.';
          break;
      }
    }
    el.dataset.status = status;
    replaceChildren(el, text);
  }

  private _renderCompiling(): void {
    const compiling = this._model?.compiling;
    const seconds = this._model?.compilingSeconds();
    if (!compiling || seconds === null || seconds === undefined) {
      replaceChildren(this._compilingSlot);
      return;
    }
    const nodes = compiling.numNodes !== null ? `, ${compiling.numNodes} nodes` : '';
    const text = `compiling graph ${shortHash(compiling.graphHash)} (${formatElapsed(seconds)})${nodes}`;
    let el = this._compilingSlot.firstElementChild as HTMLElement | null;
    if (!el) {
      el = h('div', { class: 'xlalab-Compiling', attrs: testId('xlalab-compiling') });
      this._compilingSlot.appendChild(el);
    }
    setText(el, text);
    el.title = compiling.where?.label ? `started at ${compiling.where.label}` : '';
  }

  private _renderTimeline(): void {
    const model = this._model;
    if (!model) {
      return;
    }
    const width = Math.max(120, (this._timeline.parentElement?.clientWidth ?? 0) - 4) || 260;
    const layout = layoutTimeline(
      model.events,
      model.compiling,
      model.kernelNow(),
      width,
      this._timelineWindow
    );
    renderTimeline(this._timeline, layout, width, hash => this._actions.openGraph(hash));
  }

  // -------------------------------------------------------------------------
  // Requests

  private async _request(what: string): Promise<void> {
    const bridge = this._active.bridge;
    if (!bridge) {
      return;
    }
    try {
      const result = await bridge.request(what);
      if (what === 'snapshot' && bridge.model === this._model) {
        // A fresh snapshot arrives as a reply, not an update: apply it like one.
        bridge.model.applySnapshot(result);
      }
      setText(this._notice, '');
    } catch (error) {
      setText(this._notice, `${what} failed: ${(error as Error).message}`);
    }
  }

  private async _showReport(): Promise<void> {
    const bridge = this._active.bridge;
    if (!bridge) {
      return;
    }
    const askedAt: [number, number] = [bridge.model.clears, bridge.model.generation];
    try {
      const result = (await bridge.request('metrics_report', { short: false })) as { text?: unknown };
      this._reportAskedAt = askedAt;
      const text = typeof result?.text === 'string' ? result.text.trim() : '';
      setText(this._reportText, text || 'No metrics recorded since the last clear.');
      this._report.classList.remove('xlalab-mod-hidden');
      setText(this._notice, '');
    } catch (error) {
      setText(this._notice, `metrics report failed: ${(error as Error).message}`);
    }
  }
}
