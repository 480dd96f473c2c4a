// @vitest-environment jsdom
import { describe, expect, it } from 'vitest';

import { KernelModel } from '../src/model';
import { readEvent, XlaEvent } from '../src/protocol';
import { LEGEND, fitLabel, layoutTimeline, renderTimeline } from '../src/timeline';
import { ManualClock, hello, location, update } from './helpers';

const T0 = 1_700_000_000;

/** A region event as the kernel sends it (xlalab.runtime.events.RegionEvent, through the watcher). */
function region(
  name: string,
  phase: 'start' | 'end',
  id: number,
  time: number,
  extra: Record<string, unknown> = {}
): Record<string, unknown> {
  return {
    kind: 'region',
    time,
    name,
    phase,
    region: id,
    depth: 0,
    step: null,
    seconds: 0,
    frames: [],
    where: location(2, 5),
    ...extra
  };
}

/** One training step: StepTrace "train_step" (step 3) around Trace "forward", then an execution. */
const STEP = [
  region('train_step', 'start', 1, T0, { step: 3 }),
  region('forward', 'start', 2, T0 + 0.1, { depth: 1 }),
  region('forward', 'end', 2, T0 + 0.4, { depth: 1, seconds: 0.3 }),
  { kind: 'execute', time: T0 + 0.9, seconds: 0.2, graph_hash: 'ab12', where: null },
  region('train_step', 'end', 1, T0 + 1, { step: 3, seconds: 1 })
];

function events(raw: Record<string, unknown>[]): XlaEvent[] {
  return raw.map(readEvent).filter((e): e is XlaEvent => e !== null);
}

describe('profiler regions on the timeline', () => {
  it('reads a region event with its name, phase, pairing id, nesting and step', () => {
    const [start] = events([STEP[0]]);
    expect(start).toMatchObject({
      kind: 'region',
      name: 'train_step',
      phase: 'start',
      region: 1,
      depth: 0,
      step: 3
    });
    const [inner] = events([STEP[1]]);
    expect(inner.step).toBeUndefined(); // a Trace has no step (null from the kernel)
    expect(inner.where?.label).toBe('cell [5], line 2');
  });

  it('keeps region events in the model for the timeline', () => {
    const model = new KernelModel({ clock: new ManualClock(), notifyIntervalMs: 100 });
    model.handleMessage(hello());
    model.handleMessage(update(1, STEP));
    expect(model.events.map(e => e.kind)).toEqual(['region', 'region', 'region', 'execute', 'region']);
  });

  it('draws each ended region as a labelled span from its start to its end, enclosing ones first', () => {
    const layout = layoutTimeline(events(STEP), null, T0 + 1, 1000);
    const regions = layout.marks.filter(m => m.lane === 'region');
    expect(regions.map(m => [m.label, m.depth, m.kind])).toEqual([
      ['train_step (step 3)', 0, 'region'],
      ['forward', 1, 'region']
    ]);
    const [step, forward] = regions;
    // The step spans one second of a window of 1.05 s; forward is 0.3 s of it, 0.1 s in.
    expect(step.width).toBeCloseTo((1 / 1.05) * 1000, 0);
    expect(forward.width).toBeCloseTo((0.3 / 1.05) * 1000, 0);
    expect(forward.x - step.x).toBeCloseTo((0.1 / 1.05) * 1000, 0);
    expect(step.title).toBe('region train_step (step 3) in 1.00 s at cell [5], line 2');
    // Both names fit, the inner one starting where it does, right of the outer name.
    expect(step.text).toBe('train_step (step 3)');
    expect(forward.text).toBe('forward');
    const execute = layout.marks.find(m => m.lane === 'execute');
    expect(execute && execute.x).toBeGreaterThan(forward.x + forward.width);
  });

  it('draws a region that has not ended as running up to now', () => {
    const layout = layoutTimeline(events(STEP.slice(0, 3)), null, T0 + 2, 500);
    const running = layout.marks.find(m => m.kind === 'region-running');
    expect(running?.label).toBe('train_step (step 3)');
    expect(layout.end).toBe(T0 + 2); // the window reaches now while a region runs
    expect(running && running.x + running.width).toBeCloseTo(500, 0);
    expect(running?.title).toBe('region train_step (step 3), still running at cell [5], line 2');
  });

  it('cuts names to their span and leaves out names that would overlap', () => {
    expect(fitLabel('forward_and_backward', 50)).toBe('forward…');
    expect(fitLabel('forward', 10)).toBe('');
    // At 80 px the 1 s step is wide enough for part of its name; "forward" starts under it.
    const narrow = layoutTimeline(events(STEP), null, T0 + 1, 80).marks.filter(m => m.lane === 'region');
    expect(narrow[0].text).toMatch(/^train_?…$/);
    expect(narrow[1].text).toBeUndefined();
  });

  it('renders spans with their names and a legend entry', () => {
    const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
    renderTimeline(svg, layoutTimeline(events(STEP), null, T0 + 1, 600), 600);
    const spans = [...svg.querySelectorAll('rect[data-kind="region"]')];
    expect(spans.map(r => r.getAttribute('data-label'))).toEqual(['train_step (step 3)', 'forward']);
    // The nested region is inset inside the one around it.
    const [outer, inner] = spans.map(r => Number(r.getAttribute('height')));
    expect(inner).toBeLessThan(outer);
    const labels = [...svg.querySelectorAll('text.xlalab-Timeline-regionLabel')].map(t => t.textContent);
    expect(labels).toEqual(['train_step (step 3)', 'forward']);
    expect(spans[0].querySelector('title')?.textContent).toContain('train_step');
    expect(LEGEND.map(l => l.kind)).toContain('region');
  });
});
