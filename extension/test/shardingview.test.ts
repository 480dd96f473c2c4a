// @vitest-environment jsdom
import { Graphviz } from '@hpcc-js/wasm-graphviz';
import { describe, expect, it } from 'vitest';

import { annotateDot, readGraphPayload, tidyDotLabels } from '../src/graphpolicy';
import {
  COLLECTIVE_STROKE,
  SHARDING_PALETTE,
  collectiveNotes,
  paintShardings,
  shardingLegend,
  shortShape
} from '../src/shardingview';
import { sanitizeSvg } from '../src/svgsanitize';

const COLS = '{devices=[1,8]0,1,2,3,4,5,6,7}';
const ROWS = '{devices=[8,1]0,1,2,3,4,5,6,7}';

/** What `%xla_graph --format dot` sends for `left @ right` constrained by rows (SPMD, 8 devices). */
function spmdPayload(collectives: unknown): Record<string, unknown> {
  return {
    v: 1,
    hash: 'cc04',
    title: 'pending graph of q (6 nodes)',
    dot: [
      'digraph G {',
      `  node0 [label="xla::device_data\\nf32[64,64]{1,0}\\nsharding=${COLS}\\nxla_shape=f32[64,64]{1,0}"]`,
      `  node1 [label="xla::device_data\\nf32[64,64]{1,0}\\nsharding=${COLS}\\nxla_shape=f32[64,64]{1,0}"]`,
      '  node2 [label="aten::mm\\nf32[64,64]{1,0}\\nxla_shape=f32[64,64]{1,0}"]',
      `  node3 [label="xla::custom_sharding\\nf32[64,64]{1,0}\\nsharding=${ROWS}\\nxla_shape=f32[64,64]{1,0}"]`,
      '  node1 -> node2 [label="i=1"]',
      '  node0 -> node2 [label="i=0"]',
      '  node2 -> node3',
      '}'
    ].join('\n'),
    num_nodes: 4,
    shown_nodes: 4,
    nodes: [
      {
        id: 'node0',
        op: 'xla::device_data',
        shape: 'f32[64,64]{1,0}',
        frames: [],
        roots: [],
        sharding: COLS
      },
      {
        id: 'node1',
        op: 'xla::device_data',
        shape: 'f32[64,64]{1,0}',
        frames: [],
        roots: [],
        sharding: COLS
      },
      { id: 'node2', op: 'aten::mm', shape: 'f32[64,64]{1,0}', frames: [], roots: [], sharding: null },
      {
        id: 'node3',
        op: 'xla::custom_sharding',
        shape: 'f32[64,64]{1,0}',
        frames: [],
        roots: [0],
        sharding: ROWS
      }
    ],
    op_counts: [['xla::device_data', 2]],
    shardings: [
      { spec: COLS, nodes: 2 },
      { spec: ROWS, nodes: 1 }
    ],
    collectives
  };
}

const GATHER = {
  kind: 'all-gather',
  shape: 'f32[64,64]{0,1}',
  nbytes: 16384,
  op: 'aten::mm',
  location: 'train.py:12',
  replica_groups: "mesh['axis_0'=1,'axis_1'=8] {'axis_1'}",
  nodes: ['node2']
};
const ALL_TO_ALL = {
  kind: 'all-to-all',
  shape: '(f32[1,8,8]{2,1,0}, f32[1,8,8]{2,1,0}, /*index=2*/f32[1,8,8]{2,1,0})',
  nbytes: 768,
  op: 'aten::mm',
  location: '',
  replica_groups: '',
  nodes: ['node2', 42]
};

describe('shardings in the graph payload', () => {
  it('reads node shardings, the legend and the collectives', () => {
    const payload = readGraphPayload(spmdPayload([GATHER, ALL_TO_ALL, { kind: 3 }]))!;
    expect(payload.spmd).toBe(true);
    expect(payload.compiled).toBe(true);
    expect(payload.nodes.map(n => n.sharding)).toEqual([COLS, COLS, null, ROWS]);
    expect(payload.shardings).toEqual([
      { spec: COLS, nodes: 2 },
      { spec: ROWS, nodes: 1 }
    ]);
    expect(payload.collectives.map(c => c.kind)).toEqual(['all-gather', 'all-to-all']);
    expect(payload.collectives[1].nodes).toEqual(['node2']); // the number is dropped
  });

  it('tells a graph not compiled yet from one outside SPMD', () => {
    const pending = readGraphPayload(spmdPayload(null))!;
    expect(pending.spmd && !pending.compiled).toBe(true);
    const plain = readGraphPayload({ dot: 'digraph G {}', nodes: [{ id: 'node0', op: 'aten::add' }] })!;
    expect(plain.spmd).toBe(false);
    expect(plain.nodes[0].sharding).toBeNull();
    expect(shardingLegend(plain)).toBeNull();
  });

  it('says collectives in a few words on the nodes that needed them', () => {
    const payload = readGraphPayload(spmdPayload([GATHER, ALL_TO_ALL]))!;
    expect(shortShape(ALL_TO_ALL.shape)).toBe('3 × f32[1,8,8]');
    expect(shortShape('f32[64,64]{0,1}')).toBe('f32[64,64]');
    const notes = collectiveNotes(payload);
    expect([...notes.keys()]).toEqual(['node2']);
    expect(notes.get('node2')).toBe(
      '⇆ all-gather f32[64,64] (16 KB per device); ⇆ all-to-all 3 × f32[1,8,8] (768 B per device)'
    );
    const dot = annotateDot(tidyDotLabels(payload.dot), notes);
    expect(dot).toContain('aten::mm\\nf32[64,64]{1,0}\\n⇆ all-gather f32[64,64] (16 KB per device);');
  });

  it('fills laid-out nodes by sharding and outlines the collective op', async () => {
    const payload = readGraphPayload(spmdPayload([GATHER]))!;
    const graphviz = await Graphviz.load();
    const svg = sanitizeSvg(graphviz.dot(annotateDot(tidyDotLabels(payload.dot), collectiveNotes(payload))))!;
    paintShardings(svg, payload);
    const fills: Record<string, string | null> = {};
    const strokes: Record<string, string | null> = {};
    for (const group of svg.querySelectorAll('g.node')) {
      const id = group.querySelector('title')!.textContent!.trim();
      fills[id] =
        group.getAttribute('data-sharding') && group.querySelector('polygon, ellipse')!.getAttribute('fill');
      strokes[id] = group.querySelector('polygon, ellipse')!.getAttribute('stroke');
    }
    expect(fills).toEqual({
      node0: SHARDING_PALETTE[0],
      node1: SHARDING_PALETTE[0],
      node2: null,
      node3: SHARDING_PALETTE[1]
    });
    expect(strokes.node2).toBe(COLLECTIVE_STROKE);
    expect(strokes.node0).not.toBe(COLLECTIVE_STROKE);
    expect(svg.textContent).toContain('⇆ all-gather f32[64,64] (16 KB per device)');
  });

  it('draws a legend of shardings and collectives', () => {
    const legend = shardingLegend(readGraphPayload(spmdPayload([GATHER]))!)!;
    const entries = [...legend.querySelectorAll('[data-testid="xlalab-sharding-entry"]')];
    expect(entries.map(e => e.textContent)).toEqual([`${COLS} 2 nodes`, `${ROWS} 1 node`]);
    const swatch = entries[1].querySelector('.xlalab-Sharding-swatch') as HTMLElement;
    expect(swatch.style.background).toBe('rgb(187, 247, 208)'); // SHARDING_PALETTE[1]
    expect(legend.textContent).toContain('1 collective the partitioner inserted, 16 KB per device per run:');
    const items = [...legend.querySelectorAll('[data-testid="xlalab-collective"]')];
    expect(items.map(i => i.textContent)).toEqual([
      'all-gather f32[64,64] (16 KB per device) for aten::mm at train.py:12'
    ]);
    const pending = shardingLegend(readGraphPayload(spmdPayload(null))!)!;
    expect(pending.textContent).toContain('Not compiled yet');
    const none = shardingLegend(readGraphPayload(spmdPayload([]))!)!;
    expect(none.textContent).toContain('The compiled program has no collectives.');
  });
});
