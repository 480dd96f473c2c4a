/**
 * The graph viewer: renders an `application/vnd.xlalab.graph+json` payload as a
 * Graphviz drawing with pan, zoom and a node inspector, or as an op-count summary
 * when the graph is too large to lay out.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { h, replaceChildren } from './dom';
import { countOf, formatCount, shortHash, truncate } from './format';
import { NodeChange } from './graphdiff';
import {
  GRAPH_MIME,
  GraphNode,
  GraphPayload,
  annotateDot,
  chooseGraphMode,
  readGraphPayload,
  tidyDotLabels
} from './graphpolicy';
import { layoutDot } from './layout';
import { PanZoom, parseViewBox } from './panzoom';
import { SourceLocation } from './protocol';
import { collectiveNotes, paintShardings, shardingLegend } from './shardingview';
import { sanitizeSvg } from './svgsanitize';

function testId(id: string): Record<string, string> {
  return { 'data-testid': id };
}

/** Node labels are drawn at least this tall (screen px) when the graph first shows. */
export const MIN_LABEL_PX = 12;

/**
 * The DOM event a source link dispatches (bubbling, `detail` the location). The plugin
 * (index.ts) listens on the document and jumps in the notebook that holds the graph: the
 * MIME renderer is a separate entry point, so an event is how the two meet.
 */
export const JUMP_EVENT = 'xlalab-jump-to-line';

export interface GraphViewOptions {
  /** nodes to highlight (a recompile's differences), by dot node id */
  changes?: Map<string, NodeChange>;
}

export class GraphView extends Widget implements IRenderMime.IRenderer {
  private _panZoom: PanZoom | null = null;
  private _nodes = new Map<string, GraphNode>();
  private _selected: Element | null = null;
  private readonly _header = h('div', { class: 'xlalab-Graph-header' });
  private readonly _toolbar = h('div', { class: 'xlalab-Graph-toolbar' });
  private readonly _legend = h('div', { class: 'xlalab-Graph-legend' });
  private readonly _canvas = h('div', { class: 'xlalab-Graph-canvas' });
  private readonly _inspector = h('div', { class: 'xlalab-Graph-inspector' });

  constructor() {
    super();
    this.addClass('xlalab-Graph');
    this.node.setAttribute('data-testid', 'xlalab-graph');
    replaceChildren(this.node, this._header, this._toolbar, this._legend, this._canvas, this._inspector);
    this._canvas.addEventListener('click', this._onCanvasClick);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    await this.renderPayload(model.data[GRAPH_MIME]);
  }

  /** Renders a payload (from an output, or from a `graph` request's reply). */
  async renderPayload(raw: unknown, options: GraphViewOptions = {}): Promise<void> {
    const payload = readGraphPayload(raw);
    this._reset();
    if (!payload) {
      replaceChildren(this._canvas, h('p', { class: 'xlalab-Graph-message' }, 'Not a graph payload.'));
      return;
    }
    this._nodes = new Map(payload.nodes.map(n => [n.id, n]));
    this._renderHeader(payload);
    replaceChildren(this._legend, shardingLegend(payload));
    const mode = chooseGraphMode(payload);
    if (mode.mode === 'summary') {
      this._renderSummary(payload, mode.reason);
      return;
    }
    replaceChildren(this._canvas, h('p', { class: 'xlalab-Graph-message' }, 'Laying out the graph…'));
    const changes = options.changes ?? new Map<string, NodeChange>();
    const notes = collectiveNotes(payload);
    for (const [id, change] of changes) {
      notes.set(id, notes.has(id) ? `${change.note}; ${notes.get(id)}` : change.note);
    }
    let svgText: string;
    try {
      svgText = await layoutDot(annotateDot(tidyDotLabels(payload.dot), notes));
    } catch (error) {
      this._renderSummary(payload, (error as Error).message);
      return;
    }
    if (this.isDisposed) {
      return;
    }
    const svg = sanitizeSvg(svgText);
    const home = svg && parseViewBox(svg.getAttribute('viewBox'));
    if (!svg || !home) {
      this._renderSummary(payload, 'Graphviz returned no usable drawing.');
      return;
    }
    // The drawing fills the canvas; the viewBox does the zooming.
    svg.setAttribute('width', '100%');
    svg.setAttribute('height', '100%');
    svg.classList.add('xlalab-Graph-svg');
    paintShardings(svg, payload);
    for (const group of svg.querySelectorAll('g.node')) {
      const change = changes.get(group.querySelector('title')?.textContent?.trim() ?? '');
      if (change) {
        group.classList.add('xlalab-mod-diff', `xlalab-mod-${change.kind}`);
        group.setAttribute('data-change', change.kind);
      }
    }
    replaceChildren(this._canvas, svg);
    this._panZoom = new PanZoom(svg, home);
    this._renderToolbar();
    this._legibleOnceShown(svg);
  }

  /**
   * The first view: the whole graph when its labels are legible that way, else the top of
   * the graph at a zoom where they are (a 300-node graph fitted into 420 px has 2 px text).
   */
  private _legibleOnceShown(svg: SVGSVGElement): void {
    const fontSize = Math.max(
      0,
      ...[...svg.querySelectorAll('g.node text')]
        .slice(0, 50)
        .map(t => Number(t.getAttribute('font-size')) || 0)
    );
    if (!fontSize) {
      return;
    }
    const apply = (): boolean => {
      const panZoom = this._panZoom;
      const ppu = panZoom?.pixelsPerUnit() ?? 0;
      if (!panZoom || ppu <= 0 || svg.getBoundingClientRect().width <= 0) {
        return false;
      }
      if (ppu * fontSize < MIN_LABEL_PX) {
        panZoom.showTopAt(MIN_LABEL_PX / fontSize);
      }
      return true;
    };
    if (apply() || typeof ResizeObserver === 'undefined') {
      return;
    }
    // Not on screen yet (an output being attached, a hidden tab): once it has a size.
    const observer = new ResizeObserver(() => {
      if (this.isDisposed || !svg.isConnected || apply()) {
        observer.disconnect();
      }
    });
    observer.observe(this._canvas);
  }

  dispose(): void {
    this._canvas.removeEventListener('click', this._onCanvasClick);
    super.dispose();
  }

  // -------------------------------------------------------------------------

  private _reset(): void {
    this._panZoom = null;
    this._selected = null;
    this._nodes.clear();
    replaceChildren(this._header);
    replaceChildren(this._toolbar);
    replaceChildren(this._legend);
    replaceChildren(this._inspector);
    this._inspector.removeAttribute('data-testid');
    this._canvas.classList.remove('xlalab-mod-summary');
  }

  private _renderHeader(payload: GraphPayload): void {
    const parts: string[] = [];
    // The kernel's titles usually name the hash and the node count already: say each once.
    if (payload.hash && !payload.title.includes(payload.hash)) {
      parts.push(`graph ${shortHash(payload.hash)}`);
    }
    const titleCounts = new RegExp(`\\b${payload.num_nodes} nodes?\\b`).test(payload.title);
    if (payload.shown_nodes < payload.num_nodes) {
      parts.push(
        titleCounts
          ? `${payload.shown_nodes} of them shown`
          : `${payload.shown_nodes} of ${countOf(payload.num_nodes, 'node')} shown`
      );
    } else if (!/\bnodes?\b/.test(payload.title)) {
      parts.push(countOf(payload.num_nodes, 'node'));
    }
    replaceChildren(
      this._header,
      h(
        'span',
        { class: 'xlalab-Graph-title', attrs: testId('xlalab-graph-title') },
        truncate(payload.title || 'XLA graph', 200)
      ),
      parts.length
        ? h('span', { class: 'xlalab-Graph-meta', attrs: testId('xlalab-graph-meta') }, parts.join(', '))
        : null
    );
  }

  private _renderToolbar(): void {
    const button = (id: string, label: string, title: string, action: () => void): HTMLButtonElement =>
      h(
        'button',
        {
          class: 'jp-Button xlalab-Button',
          attrs: { 'data-testid': id, title, type: 'button' },
          on: { click: action }
        },
        label
      );
    replaceChildren(
      this._toolbar,
      button('xlalab-graph-zoom-in', '+', 'Zoom in', () => this._panZoom?.zoomIn()),
      button('xlalab-graph-zoom-out', '−', 'Zoom out', () => this._panZoom?.zoomOut()),
      button('xlalab-graph-fit', 'Fit', 'Fit the whole graph', () => this._panZoom?.fit()),
      h('span', { class: 'xlalab-Graph-hint' }, 'wheel to zoom, drag to pan, click a node for details')
    );
  }

  private _renderSummary(payload: GraphPayload, reason: string): void {
    const rows = [...payload.op_counts]
      .sort((a, b) => b[1] - a[1])
      .map(([op, count]) =>
        h('tr', {}, h('td', {}, op), h('td', { class: 'xlalab-Num' }, formatCount(count)))
      );
    replaceChildren(
      this._canvas,
      h(
        'div',
        { class: 'xlalab-Graph-summary', attrs: testId('xlalab-graph-summary') },
        h('p', {}, reason, ' Op counts instead:'),
        h(
          'table',
          { class: 'xlalab-Table' },
          h('thead', {}, h('tr', {}, h('th', {}, 'op'), h('th', {}, 'count'))),
          h('tbody', {}, ...rows)
        )
      )
    );
    this._canvas.classList.add('xlalab-mod-summary');
  }

  /** Clicks on a drawn node show its op, shape and source frames. */
  private _onCanvasClick = (event: MouseEvent): void => {
    const target = event.target as Element | null;
    const group = target?.closest?.('g.node');
    if (!group) {
      return;
    }
    // Graphviz puts the dot node name (`node<N>`) in the group's <title>.
    const name = group.querySelector('title')?.textContent?.trim() ?? '';
    this._selected?.classList.remove('xlalab-mod-selected');
    group.classList.add('xlalab-mod-selected');
    this._selected = group;
    this._showNode(name, this._nodes.get(name));
  };

  private _showNode(name: string, node: GraphNode | undefined): void {
    this._inspector.setAttribute('data-testid', 'xlalab-graph-inspector');
    const close = h(
      'button',
      {
        class: 'xlalab-Graph-close',
        attrs: { title: 'Close', type: 'button' },
        on: {
          click: () => {
            replaceChildren(this._inspector);
            this._inspector.removeAttribute('data-testid');
            this._selected?.classList.remove('xlalab-mod-selected');
            this._selected = null;
          }
        }
      },
      '×'
    );
    if (!node) {
      replaceChildren(this._inspector, close, h('p', {}, `${name}: no details (an elided run of nodes).`));
      return;
    }
    const field = (label: string, value: string): HTMLElement =>
      h(
        'div',
        { class: 'xlalab-Field' },
        h('span', { class: 'xlalab-Field-label' }, label),
        h('code', {}, value)
      );
    replaceChildren(
      this._inspector,
      close,
      field('node', node.id),
      field('op', node.op),
      field('shape', node.shape || '—'),
      node.sharding ? field('sharding', node.sharding) : null,
      node.roots.length ? field('root of outputs', node.roots.join(', ')) : null,
      node.frames.length
        ? h('div', { class: 'xlalab-Field-label' }, 'source')
        : h(
            'p',
            { class: 'xlalab-Graph-noFrames', attrs: testId('xlalab-graph-no-frames') },
            'No source line was recorded for this node (an input, or an op made while line ' +
              'recording was off). ',
            h('code', {}, '%xla_debug on'),
            ' records the line that creates every op, from the next cell on.'
          ),
      node.frames.length
        ? h('ol', { class: 'xlalab-Frames' }, ...node.frames.map(f => this._frameItem(f)))
        : null
    );
  }

  /** A source frame; one in a notebook cell is a link that jumps to its cell and line. */
  private _frameItem(frame: SourceLocation): HTMLElement {
    const suffix = frame.function && frame.function !== '<module>' ? ` in ${frame.function}` : '';
    if (!frame.cell) {
      return h('li', {}, h('code', {}, frame.label), suffix);
    }
    return h(
      'li',
      {},
      h(
        'a',
        {
          class: 'xlalab-FrameLink',
          attrs: {
            href: '#',
            'data-testid': 'xlalab-frame-link',
            'data-cell-id': frame.cell.cell_id ?? '',
            'data-line': frame.line,
            title: `Go to ${frame.label}`
          },
          on: {
            click: (event: Event) => {
              event.preventDefault();
              event.target?.dispatchEvent(new CustomEvent(JUMP_EVENT, { bubbles: true, detail: frame }));
            }
          }
        },
        frame.label
      ),
      suffix
    );
  }
}

export const graphRendererFactory: IRenderMime.IRendererFactory = {
  // The SVG is rebuilt from an allowlist and all text goes in as text, so untrusted
  // notebooks may render it too.
  safe: true,
  mimeTypes: [GRAPH_MIME],
  createRenderer: () => new GraphView()
};
