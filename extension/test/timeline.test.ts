import { describe, expect, it } from 'vitest';

import { ITEM_READ_OP, LEGEND, formatSpan, hostKind, layoutTimeline } from '../src/timeline';
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

  it('shows every kept event, however old, unless a window is chosen', () => {
    const events = [ev('execute', 0, { seconds: 0.1 }), ev('execute', 1000, { seconds: 0.1 })];
    const all = layoutTimeline(events, null, 1000, 300);
    expect(all.marks).toHaveLength(2);
    expect(all.end - all.start).toBeGreaterThan(1000);
    const recent = layoutTimeline(events, null, 1000, 300, 120);
    expect(recent.marks).toHaveLength(1);
    expect(recent.end - recent.start).toBe(120);
  });

  it('draws an .item() as a read, not a CPU fallback, and a mark_step as a step', () => {
    const layout = layoutTimeline(
      [
        ev('sync', 10, { reason: 'item' }),
        ev('fallback', 10.1, { op: ITEM_READ_OP }),
        ev('transfer', 10.2, { direction: 'from_device', nbytes: 4 }),
        ev('sync', 11, { reason: 'mark_step' }),
        ev('fallback', 12, { op: 'aten::nonzero' })
      ],
      null,
      12,
      400
    );
    expect(layout.marks.map(m => m.kind)).toEqual(['read', 'read', 'transfer', 'step', 'fallback']);
    expect(layout.marks[1].title).toContain('.item()');
    expect(layout.marks[1].title).not.toContain('fallback');
    expect(layout.marks[2].title).toContain('4 B');
    // every kind drawn has a legend entry
    const legend = new Set(LEGEND.map(e => e.kind));
    for (const mark of layout.marks) {
      expect(legend.has(mark.kind)).toBe(true);
    }
    expect(hostKind(ev('execute', 1))).toBeNull();
  });

  it('labels the axis span in units a person reads', () => {
    expect(formatSpan(45.2)).toBe('45 s');
    expect(formatSpan(600)).toBe('10 min');
    expect(formatSpan(9000)).toBe('2.5 h');
    expect(formatSpan(7200)).toBe('2 h');
  });
});
