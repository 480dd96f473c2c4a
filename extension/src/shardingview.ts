/**
 * SPMD in the graph viewer: nodes filled by their sharding, the collectives XLA's
 * partitioner inserted marked on the nodes whose op needed them, and a legend of both.
 *
 * The payload says each node's sharding (torch_xla's spec string, or null) and, once the
 * graph has been compiled, the compiled program's collectives (docs/lab-protocol.md).
 */
import { h } from './dom';
import { countOf, formatBytes, truncate } from './format';
import { GraphCollective, GraphPayload } from './graphpolicy';

/** Fills light enough for Graphviz's black label text in light and dark themes alike. */
export const SHARDING_PALETTE = [
  '#bfdbfe',
  '#bbf7d0',
  '#fde68a',
  '#fbcfe8',
  '#ddd6fe',
  '#fed7aa',
  '#a5f3fc',
  '#d9f99d'
];
/** The outline of a node whose op needed a collective. */
export const COLLECTIVE_STROKE = '#0f766e';

/** Each sharding's fill, in the legend's order (first seen first); colours repeat past 8. */
export function shardingColors(payload: GraphPayload): Map<string, string> {
  const colors = new Map<string, string>();
  payload.shardings.forEach((entry, i) => {
    colors.set(entry.spec, SHARDING_PALETTE[i % SHARDING_PALETTE.length]);
  });
  return colors;
}

/** A collective in a few words: `all-gather f32[64,64] (16.4 KB per device)`. */
export function describeCollective(c: GraphCollective): string {
  return `${c.kind} ${shortShape(c.shape)} (${formatBytes(c.nbytes)} per device)`;
}

/**
 * An HLO result shape, short: a tuple of equal arrays (an all-to-all's) as `8 × f32[1,8,8]`,
 * layouts (`{1,0}`) dropped.
 */
export function shortShape(shape: string): string {
  const arrays = [...shape.matchAll(/\b(pred|bf16|[fsuc]\d+)\[[\d,]*\]/g)].map(m => m[0]);
  if (arrays.length > 1 && arrays.every(a => a === arrays[0])) {
    return `${arrays.length} × ${arrays[0]}`;
  }
  return arrays.length ? arrays.join(', ') : truncate(shape, 60);
}

/** The label line each node gets for the collectives its op needed (node id -> text). */
export function collectiveNotes(payload: GraphPayload): Map<string, string> {
  const byNode = new Map<string, string[]>();
  for (const c of payload.collectives) {
    for (const id of c.nodes) {
      const list = byNode.get(id) ?? [];
      list.push(`⇆ ${describeCollective(c)}`);
      byNode.set(id, list);
    }
  }
  return new Map([...byNode].map(([id, lines]) => [id, lines.join('; ')]));
}

/** Fills the drawn nodes by sharding and outlines those that needed a collective. */
export function paintShardings(svg: SVGSVGElement, payload: GraphPayload): void {
  const colors = shardingColors(payload);
  const specs = new Map(payload.nodes.map(n => [n.id, n.sharding]));
  const collective = new Set(payload.collectives.flatMap(c => c.nodes));
  for (const group of svg.querySelectorAll('g.node')) {
    const id = group.querySelector('title')?.textContent?.trim() ?? '';
    const spec = specs.get(id);
    const shapes = group.querySelectorAll('polygon, ellipse, path');
    if (spec) {
      group.setAttribute('data-sharding', spec);
      for (const shape of shapes) {
        shape.setAttribute('fill', colors.get(spec) ?? 'none');
      }
    }
    if (collective.has(id)) {
      group.setAttribute('data-collective', 'true');
      for (const shape of shapes) {
        shape.setAttribute('stroke', COLLECTIVE_STROKE);
        shape.setAttribute('stroke-width', '3');
      }
    }
  }
}

function swatch(fill: string, stroke = '#555', width = 1): HTMLElement {
  return h('span', {
    class: 'xlalab-Sharding-swatch',
    attrs: {
      style:
        `display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:middle;` +
        `background:${fill};border:${width}px solid ${stroke}`
    }
  });
}

/**
 * The legend under the toolbar: each sharding with its colour and node count, then the
 * collectives (or why there are none to show). Null for a graph with no SPMD information.
 */
export function shardingLegend(payload: GraphPayload): HTMLElement | null {
  if (!payload.spmd) {
    return null;
  }
  const colors = shardingColors(payload);
  const rows: HTMLElement[] = payload.shardings.map(entry =>
    h(
      'li',
      { attrs: { 'data-testid': 'xlalab-sharding-entry', 'data-sharding': entry.spec } },
      swatch(colors.get(entry.spec) ?? 'none'),
      h('code', {}, truncate(entry.spec, 120)),
      ` ${countOf(entry.nodes, 'node')}`
    )
  );
  if (!rows.length) {
    rows.push(h('li', {}, 'No node of this graph has a sharding: the partitioner chooses them all.'));
  }
  let collectives: HTMLElement;
  if (!payload.compiled) {
    collectives = h(
      'p',
      { class: 'xlalab-Sharding-note' },
      'Not compiled yet: the collectives the partitioner inserts show once this graph has run.'
    );
  } else if (!payload.collectives.length) {
    collectives = h('p', { class: 'xlalab-Sharding-note' }, 'The compiled program has no collectives.');
  } else {
    const total = payload.collectives.reduce((sum, c) => sum + c.nbytes, 0);
    collectives = h(
      'div',
      {},
      h(
        'div',
        {},
        swatch('none', COLLECTIVE_STROKE, 3),
        `${countOf(payload.collectives.length, 'collective')} the partitioner inserted, ` +
          `${formatBytes(total)} per device per run:`
      ),
      h(
        'ul',
        { class: 'xlalab-Sharding-collectives', attrs: { style: 'margin:2px 0' } },
        ...payload.collectives.map(c =>
          h(
            'li',
            { attrs: { 'data-testid': 'xlalab-collective', 'data-kind': c.kind } },
            describeCollective(c),
            c.op ? ` for ${c.op}` : '',
            c.location ? ` at ${c.location}` : ''
          )
        )
      )
    );
  }
  return h(
    'div',
    {
      class: 'xlalab-Sharding-legend',
      attrs: {
        'data-testid': 'xlalab-sharding-legend',
        style: 'margin:4px 0;font-size:var(--jp-ui-font-size1)'
      }
    },
    h('div', {}, h('b', {}, 'Shardings')),
    h(
      'ul',
      { class: 'xlalab-Sharding-specs', attrs: { style: 'list-style:none;padding-left:0;margin:2px 0' } },
      ...rows
    ),
    collectives
  );
}
