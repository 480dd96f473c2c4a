import { describe, expect, it } from 'vitest';

import { chooseGraphMode, countDotNodes, readGraphPayload } from '../src/graphpolicy';

function dotWith(n: number): string {
  const lines = ['digraph G {'];
  for (let i = 0; i < n; i++) {
    lines.push(`  node${i} [label="aten::add"];`);
    if (i > 0) {
      lines.push(`  node${i - 1} -> node${i};`);
    }
  }
  lines.push('}');
  return lines.join('\n');
}

describe('graph payload', () => {
  it('reads the protocol payload', () => {
    const payload = readGraphPayload({
      v: 1,
      hash: '3fa2',
      title: 'pending graph of loss (14 nodes)',
      dot: dotWith(3),
      num_nodes: 14,
      shown_nodes: 3,
      nodes: [
        {
          id: 'node1',
          op: 'aten::mm',
          shape: 'f32[64,10]{1,0}',
          frames: [{ file: 'a.py', line: 3, label: 'a.py:3' }],
          roots: [0]
        },
        { op: 'no id' }
      ],
      op_counts: [['aten::mm', 3], ['bad'], [1, 2]]
    });
    expect(payload?.nodes.map(n => n.id)).toEqual(['node1']);
    expect(payload?.nodes[0].frames[0].label).toBe('a.py:3');
    expect(payload?.op_counts).toEqual([
      ['aten::mm', 3],
      ['bad', 0]
    ]);
    expect(readGraphPayload('nope')).toBeNull();
  });

  it('counts dot node statements, not edges', () => {
    expect(countDotNodes(dotWith(5))).toBe(5);
  });
});

describe('large-graph degradation', () => {
  const base = { hash: 'h', title: 't', nodes: [], op_counts: [] };

  it('lays out a normal graph', () => {
    const payload = readGraphPayload({ ...base, dot: dotWith(10), num_nodes: 10, shown_nodes: 10 })!;
    expect(chooseGraphMode(payload)).toEqual({ mode: 'layout' });
  });

  it('summarises past 2000 shown nodes', () => {
    const payload = readGraphPayload({ ...base, dot: dotWith(3), num_nodes: 5000, shown_nodes: 2001 })!;
    expect(chooseGraphMode(payload).mode).toBe('summary');
  });

  it('a big num_nodes with few shown nodes (elided runs) is still laid out', () => {
    const payload = readGraphPayload({ ...base, dot: dotWith(300), num_nodes: 100000, shown_nodes: 300 })!;
    expect(chooseGraphMode(payload)).toEqual({ mode: 'layout' });
  });

  it('does not trust a shown_nodes that understates the dot', () => {
    const payload = readGraphPayload({ ...base, dot: dotWith(2500), num_nodes: 10, shown_nodes: 10 })!;
    expect(chooseGraphMode(payload).mode).toBe('summary');
  });

  it('summarises a dot text that is too long, without scanning it', () => {
    const payload = readGraphPayload({
      ...base,
      dot: 'digraph G {' + ' '.repeat(2_000_000) + '}',
      shown_nodes: 1
    })!;
    const mode = chooseGraphMode(payload);
    expect(mode.mode).toBe('summary');
    expect(mode.mode === 'summary' && mode.reason).toMatch(/too large/);
  });

  it('summarises a payload without dot', () => {
    const payload = readGraphPayload({ ...base, dot: '' })!;
    expect(chooseGraphMode(payload).mode).toBe('summary');
  });
});
