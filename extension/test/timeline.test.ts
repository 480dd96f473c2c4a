import { describe, expect, it } from 'vitest';

import { layoutTimeline } from '../src/timeline';
import { XlaEvent } from '../src/protocol';

const ev = (kind: string, time: number, extra: Partial<XlaEvent> = {}): XlaEvent => ({
  kind,
  time,
  where: null,
  ...extra
});

describe('timeline layout', () => {
  it('places compiles, executions and host events in their lanes', () => {
    const layout = layoutTimeline(
      [
        ev('compile', 100, { seconds: 2, cached: false, graph_hash: 'aa' }),
        ev('compile', 101, { seconds: 0, cached: true, graph_hash: 'aa' }),
        ev('execute', 102, { seconds: 0.5 }),
        ev('fallback', 103, { op: 'aten::nonzero' }),
        ev('transfer', 104, { direction: 'from_device', nbytes: 8 })
      ],
      null,
      200,
      500
    );
    expect(layout.end).toBe(104);
    expect(layout.marks.map(m => [m.lane, m.kind])).toEqual([
      ['compile', 'uncached'],
      ['compile', 'cached'],
      ['execute', 'execute'],
      ['host', 'fallback'],
      ['host', 'transfer']
    ]);
    const uncached = layout.marks[0];
    // a 2 s compile in a ~6 s window is about a third of the width
    expect(uncached.width).toBeGreaterThan(100);
    expect(uncached.graphHash).toBe('aa');
    expect(layout.marks[3].title).toContain('aten::nonzero');
    for (const mark of layout.marks) {
      expect(mark.x).toBeGreaterThanOrEqual(0);
      expect(mark.x + mark.width).toBeLessThanOrEqual(500.001);
      expect(mark.width).toBeGreaterThanOrEqual(2);
    }
  });

  it('grows a compiling bar up to now', () => {
    const compiling = { graphHash: 'bb', numNodes: 3, reason: '', device: '', startTime: 100, where: null };
    const layout = layoutTimeline([ev('compile_start', 100)], compiling, 110, 400);
    expect(layout.end).toBe(110);
    const bar = layout.marks.find(m => m.kind === 'compiling')!;
    expect(bar.x + bar.width).toBeCloseTo(400);
  });

  it('drops events older than the window', () => {
    const layout = layoutTimeline(
      [ev('execute', 0, { seconds: 0.1 }), ev('execute', 1000, { seconds: 0.1 })],
      null,
      1000,
      300
    );
    expect(layout.marks).toHaveLength(1);
  });
});
