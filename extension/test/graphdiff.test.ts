import { describe, expect, it } from 'vitest';

import { bareShape, diffGraphs } from '../src/graphdiff';
import { GraphPayload, annotateDot, tidyDotLabels } from '../src/graphpolicy';

function payload(hash: string, nodes: [string, string][]): GraphPayload {
  return {
    hash,
    title: `graph ${hash}`,
    dot: '',
    num_nodes: nodes.length,
    shown_nodes: nodes.length,
    nodes: nodes.map(([op, shape], i) => ({ id: `node${i}`, op, shape, frames: [], roots: [] })),
    op_counts: []
  };
}

describe('graph diff', () => {
  it('marks the nodes whose shapes changed, with the old and new shapes', () => {
    const before = payload('aa', [
      ['xla::device_data', 'f32[16,8]{1,0}'],
      ['xla::device_data', 'f32[8,16]{1,0}'],
      ['aten::mm', 'f32[16,16]{1,0}'],
      ['aten::relu', 'f32[16,16]{1,0}']
    ]);
    const after = payload('bb', [
      ['xla::device_data', 'f32[15,8]{1,0}'],
      ['xla::device_data', 'f32[8,16]{1,0}'],
      ['aten::mm', 'f32[15,16]{1,0}'],
      ['aten::relu', 'f32[15,16]{1,0}']
    ]);
    const diff = diffGraphs(before, after);
    expect([...diff.after.keys()]).toEqual(['node0', 'node2', 'node3']);
    expect(diff.after.get('node0')).toEqual({ kind: 'changed', note: 'was f32[16,8]' });
    expect(diff.before.get('node2')).toEqual({ kind: 'changed', note: 'now f32[15,16]' });
    expect(diff.before.has('node1')).toBe(false);
    expect(diff.lines[0]).toBe('xla::device_data: f32[16,8] → f32[15,8]');
  });

  it('aligns graphs whose ops differ: added and removed nodes', () => {
    const before = payload('aa', [
      ['xla::device_data', 'f32[4]'],
      ['aten::mul', 'f32[4]'],
      ['aten::sum', 'f32[]']
    ]);
    const after = payload('bb', [
      ['xla::device_data', 'f32[4]'],
      ['aten::mul', 'f32[4]'],
      ['aten::add', 'f32[4]'],
      ['aten::sum', 'f32[]']
    ]);
    const diff = diffGraphs(before, after);
    expect(diff.before.size).toBe(0);
    expect([...diff.after]).toEqual([['node2', { kind: 'added', note: 'not in the earlier graph' }]]);
    const back = diffGraphs(after, before);
    expect(back.before.get('node2')?.kind).toBe('removed');
  });

  it('finds nothing between equal graphs', () => {
    const g = payload('aa', [['aten::add', 'f32[2]{0}']]);
    expect(diffGraphs(g, g).lines).toEqual([]);
    expect(bareShape('f32[16,8]{1,0}')).toBe('f32[16,8]');
    expect(bareShape('f32[]')).toBe('f32[]');
  });
});

describe('dot labels as drawn', () => {
  const dot = [
    'digraph G {',
    '  node0 [label="xla::device_data\\nf64[]\\ninput=scalar\\nxla_shape=f64[]"]',
    '  node1 [label="aten::add\\nf32[2]{0}\\nxla_shape=f32[2]{0}\\nROOT=0"]',
    '  node2 [label="aten::view\\nf32[2]{0}\\nxla_shape=f32[1,2]{1,0}"]',
    '  node1 -> node2 [label="i=0"]',
    '}'
  ].join('\n');

  it('say each node’s shape once', () => {
    const tidy = tidyDotLabels(dot);
    expect(tidy).toContain('node0 [label="xla::device_data\\nf64[]\\ninput=scalar"]');
    expect(tidy).toContain('node1 [label="aten::add\\nf32[2]{0}\\nROOT=0"]');
    // a different xla_shape says something: it stays
    expect(tidy).toContain('xla_shape=f32[1,2]{1,0}');
    expect(tidy).toContain('node1 -> node2 [label="i=0"]');
  });

  it('carry a diff note under the node, escaped', () => {
    const notes = new Map([
      ['node1', 'was f32[3]'],
      ['node2', 'a "quoted" \\ note']
    ]);
    const out = annotateDot(dot, notes);
    expect(out).toContain(
      'node1 [label="aten::add\\nf32[2]{0}\\nxla_shape=f32[2]{0}\\nROOT=0\\nwas f32[3]"]'
    );
    expect(out).toContain('\\na \\"quoted\\" \\\\ note"]');
    expect(out).toContain('node0 [label="xla::device_data\\nf64[]\\ninput=scalar\\nxla_shape=f64[]"]');
  });
});
