/**
 * The timeline plot: the user's profiler regions, compiles, executions and host round trips
 * on a time axis, and its legend.
 *
 * `layoutTimeline` turns events into positioned marks (pure, tested); `renderTimeline`
 * draws them as SVG built element by element, with each mark's description in a
 * <title> text node (the browser shows it as a tooltip).
 */
import { s, replaceChildren } from './dom';
import { formatBytes, formatSeconds, shortHash } from './format';
import { CompileInProgress } from './model';
import { XlaEvent } from './protocol';

export type Lane = 'region' | 'compile' | 'execute' | 'host';

export interface Mark {
  lane: Lane;
  /** CSS modifier: region, uncached, cached, compiling, execute, transfer, fallback, read, step */
  kind: string;
  x: number;
  width: number;
  title: string;
  graphHash?: string;
  /** region marks: the region's name, how many regions enclose it, and the text drawn inside
   * the span at `textX` (the name cut to fit; absent where it does not fit or would overlap) */
  label?: string;
  depth?: number;
  text?: string;
  textX?: number;
}

export interface TimelineLayout {
  start: number;
  end: number;
  marks: Mark[];
}

const MIN_SPAN_S = 1;
/** a bar is never thinner than this, so a 1 ms execution stays visible */
const MIN_BAR_PX = 2;

/**
 * `.item()` runs `aten::_local_scalar_dense`, which the kernel reports as a fallback
 * event (torch_xla counts it so); it is a read of a value, and the fallback counter
 * leaves it out, so the timeline draws it as a read too.
 */
export const ITEM_READ_OP = 'aten::_local_scalar_dense';

/** What each mark colour means, in the order the legend lists them. */
export const LEGEND: readonly { kind: string; label: string; title: string }[] = [
  {
    kind: 'region',
    label: 'region',
    title: 'a region of your code: torch_xla.debug.profiler Trace, StepTrace or trace_me'
  },
  { kind: 'uncached', label: 'compile', title: 'a graph compiled by XLA (click it to open the graph)' },
  { kind: 'cached', label: 'cache hit', title: 'a graph taken from the compile cache' },
  { kind: 'compiling', label: 'compiling', title: 'a compile that is still running' },
  { kind: 'execute', label: 'execute', title: 'a compiled program running on the device' },
  { kind: 'transfer', label: 'transfer', title: 'a copy between host and device' },
  { kind: 'read', label: 'read', title: 'a value read on the host: .item(), print, .cpu()' },
  { kind: 'step', label: 'step', title: 'a step barrier: xm.mark_step()' },
  { kind: 'fallback', label: 'CPU fallback', title: 'an op without an XLA lowering ran on the CPU' }
];

/** The host lane's kind for an event: transfer, read, step or fallback. */
export function hostKind(event: XlaEvent): string | null {
  switch (event.kind) {
    case 'transfer':
      return 'transfer';
    case 'fallback':
      return event.op === ITEM_READ_OP ? 'read' : 'fallback';
    case 'sync':
      return event.reason === 'mark_step' ? 'step' : 'read';
    default:
      return null;
  }
}

function describe(event: XlaEvent): string {
  const where = event.where?.label ? ` at ${event.where.label}` : '';
  const secs = event.seconds !== undefined ? ` in ${formatSeconds(event.seconds)}` : '';
  const hash = event.graph_hash ? ` graph ${shortHash(event.graph_hash)}` : '';
  switch (event.kind) {
    case 'compile':
      return `${event.cached ? 'cached compile' : 'compile'}${hash}${secs}${where}`;
    case 'execute':
      return `execute${hash}${secs}${where}`;
    case 'transfer':
      return `transfer ${(event.direction ?? '').replace('_', ' ')}, ${formatBytes(event.nbytes ?? 0)}${where}`;
    case 'fallback':
      return event.op === ITEM_READ_OP ? `read (.item())${where}` : `CPU fallback ${event.op ?? ''}${where}`;
    case 'sync':
      return event.reason === 'mark_step'
        ? `step barrier (mark_step)${where}`
        : `read (${event.reason ?? ''}) ran the pending graph${where}`;
    case 'region':
      return event.phase === 'start'
        ? `region ${regionLabel(event)}, still running${where}`
        : `region ${regionLabel(event)}${secs}${where}`;
    default:
      return `${event.kind}${where}`;
  }
}

/** A region's name, with its step number for a StepTrace. */
export function regionLabel(event: XlaEvent): string {
  const name = event.name || 'region';
  return event.step !== undefined ? `${name} (step ${event.step})` : name;
}

/** Region starts whose end has not arrived: regions still running. */
function openRegions(events: XlaEvent[]): XlaEvent[] {
  const open = new Map<number, XlaEvent>();
  for (const event of events) {
    if (event.kind === 'region' && event.region !== undefined) {
      if (event.phase === 'start') {
        open.set(event.region, event);
      } else {
        open.delete(event.region);
      }
    }
  }
  return [...open.values()];
}

/**
 * Places events on an axis `width` px wide. The window ends at the last activity (or
 * at `now` while compiling, so the bar grows) and spans the recorded events (at least
 * 1 s), or only the last `windowSeconds` of them when that is given.
 */
export function layoutTimeline(
  events: XlaEvent[],
  compiling: CompileInProgress | null,
  now: number,
  width: number,
  windowSeconds: number | null = null
): TimelineLayout {
  let end = events.length ? events[events.length - 1].time : now;
  const running = openRegions(events);
  if (compiling || running.length) {
    end = Math.max(end, now);
  }
  // Bars end at their event's time; the window must reach back to where they start.
  let first = compiling ? compiling.startTime : end;
  for (const event of events) {
    first = Math.min(first, event.time - (event.seconds ?? 0));
  }
  const all = Math.max(MIN_SPAN_S, (end - first) * 1.05);
  const span = windowSeconds !== null && windowSeconds > 0 ? Math.min(all, windowSeconds) : all;
  const start = end - span;
  const px = (t: number): number => ((t - start) / span) * width;
  const marks: Mark[] = [];

  const bar = (lane: Lane, kind: string, from: number, to: number, event?: XlaEvent): Mark | null => {
    if (to < start) {
      return null;
    }
    // Marks at the window's edges stay whole inside it.
    const x = Math.min(Math.max(0, px(from)), width - MIN_BAR_PX);
    const mark: Mark = {
      lane,
      kind,
      x,
      width: Math.min(Math.max(MIN_BAR_PX, px(to) - x), width - x),
      title: event ? describe(event) : '',
      graphHash: event?.graph_hash
    };
    marks.push(mark);
    return mark;
  };
  const region = (event: XlaEvent, from: number, to: number, kind: string): void => {
    const mark = bar('region', kind, from, to, event);
    if (mark) {
      mark.label = regionLabel(event);
      mark.depth = event.depth ?? 0;
    }
  };

  for (const event of events) {
    const seconds = event.seconds ?? 0;
    switch (event.kind) {
      case 'compile':
        bar('compile', event.cached ? 'cached' : 'uncached', event.time - seconds, event.time, event);
        break;
      case 'execute':
        bar('execute', 'execute', event.time - seconds, event.time, event);
        break;
      case 'transfer':
      case 'fallback':
      case 'sync':
        bar('host', hostKind(event) ?? event.kind, event.time, event.time, event);
        break;
      case 'region':
        if (event.phase !== 'start') {
          region(event, event.time - seconds, event.time, 'region');
        }
        break;
      default:
        break; // compile_start is drawn from `compiling` below, or by its compile
    }
  }
  for (const event of running) {
    region(event, event.time, end, 'region-running');
  }
  // Enclosing regions first, so that the regions inside them are drawn on top.
  const regions = marks.filter(m => m.lane === 'region').sort((a, b) => (a.depth ?? 0) - (b.depth ?? 0));
  marks.splice(0, marks.length, ...regions, ...marks.filter(m => m.lane !== 'region'));
  placeRegionLabels(regions);
  if (compiling) {
    marks.push({
      lane: 'compile',
      kind: 'compiling',
      x: Math.max(0, px(compiling.startTime)),
      width: Math.max(MIN_BAR_PX, px(now) - Math.max(0, px(compiling.startTime))),
      title: `compiling graph ${shortHash(compiling.graphHash)}`,
      graphHash: compiling.graphHash
    });
  }
  return { start, end, marks };
}

const LANE_Y: Record<Lane, number> = { region: 4, compile: 22, execute: 40, host: 58 };
const LANE_HEIGHT = 14;
const AXIS_Y = 76;
export const TIMELINE_HEIGHT = 90;
/** a nested region is drawn this much shorter at each end than the one around it */
const REGION_INSET = 2;
const MAX_INSET_DEPTH = 3;
/** the width one character of a region label takes (9 px sans-serif), to fit labels in spans */
const LABEL_CHAR_PX = 5.5;

/** where the region lane's own label ("region") ends: names inside spans start after it */
const LANE_LABEL_END = 3 + 'region'.length * LABEL_CHAR_PX + 4;

/**
 * Gives region marks (enclosing ones first) their inside text: the name cut to the room left
 * in the span, never over the lane's label or a name already placed (it moves right past them).
 */
function placeRegionLabels(regions: Mark[]): void {
  const placed: [number, number][] = [];
  for (const mark of regions) {
    const spanEnd = mark.x + mark.width;
    let x = Math.max(mark.x + 2, LANE_LABEL_END);
    for (const [left, right] of [...placed].sort((a, b) => a[0] - b[0])) {
      if (x < right && left < spanEnd) {
        x = Math.max(x, right + 4);
      }
    }
    const text = fitLabel(mark.label ?? '', spanEnd - x + 2);
    if (text) {
      mark.text = text;
      mark.textX = x;
      placed.push([x, x + text.length * LABEL_CHAR_PX]);
    }
  }
}

/** `label` cut to fit `width` px, with an ellipsis; empty when not even two characters fit. */
export function fitLabel(label: string, width: number): string {
  const room = Math.floor((width - 4) / LABEL_CHAR_PX);
  if (room < 2) {
    return '';
  }
  return label.length <= room ? label : `${label.slice(0, room - 1)}…`;
}

/** Draws `layout` into `svg`, replacing what was there. */
export function renderTimeline(
  svg: SVGSVGElement,
  layout: TimelineLayout,
  width: number,
  onCompileClick?: (graphHash: string) => void
): void {
  svg.setAttribute('viewBox', `0 0 ${width} ${TIMELINE_HEIGHT}`);
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(TIMELINE_HEIGHT));
  const children: SVGElement[] = [];
  for (const lane of Object.keys(LANE_Y) as Lane[]) {
    children.push(
      s('rect', {
        class: 'xlalab-Timeline-lane',
        x: 0,
        y: LANE_Y[lane],
        width,
        height: LANE_HEIGHT
      })
    );
  }
  const labels = (Object.keys(LANE_Y) as Lane[]).map(lane =>
    s('text', { class: 'xlalab-Timeline-laneLabel', x: 3, y: LANE_Y[lane] + 10 }, lane)
  );
  const regionLabels: SVGElement[] = [];
  for (const mark of layout.marks) {
    const inset =
      mark.lane === 'host'
        ? 3
        : mark.lane === 'region'
          ? REGION_INSET * Math.min(mark.depth ?? 0, MAX_INSET_DEPTH)
          : 0;
    const rect = s('rect', {
      class: `xlalab-Timeline-mark xlalab-Timeline-${mark.kind}`,
      x: mark.x.toFixed(1),
      y: LANE_Y[mark.lane] + inset,
      width: mark.width.toFixed(1),
      height: LANE_HEIGHT - 2 * inset,
      'data-kind': mark.kind
    });
    if (mark.label !== undefined) {
      rect.setAttribute('data-label', mark.label);
      if (mark.text && mark.textX !== undefined) {
        regionLabels.push(
          s(
            'text',
            { class: 'xlalab-Timeline-regionLabel', x: mark.textX.toFixed(1), y: LANE_Y.region + 10 },
            mark.text
          )
        );
      }
    }
    rect.appendChild(s('title', {}, mark.title));
    const hash = mark.graphHash;
    if (hash && onCompileClick && mark.lane === 'compile' && mark.kind !== 'compiling') {
      rect.classList.add('xlalab-mod-clickable');
      rect.addEventListener('click', () => onCompileClick(hash));
    }
    children.push(rect);
  }
  const span = layout.end - layout.start;
  children.push(
    ...regionLabels,
    ...labels,
    s('line', { class: 'xlalab-Timeline-axis', x1: 0, y1: AXIS_Y, x2: width, y2: AXIS_Y }),
    s('text', { class: 'xlalab-Timeline-label', x: 0, y: AXIS_Y + 11 }, `−${formatSpan(span)}`),
    s('text', { class: 'xlalab-Timeline-label', x: width, y: AXIS_Y + 11, 'text-anchor': 'end' }, 'latest')
  );
  replaceChildren(svg, ...children);
}

/** An axis span: "45 s", "12 min", "2.5 h". */
export function formatSpan(seconds: number): string {
  if (seconds < 120) {
    return `${Math.round(seconds)} s`;
  }
  if (seconds < 7200) {
    return `${Math.round(seconds / 60)} min`;
  }
  return `${(seconds / 3600).toFixed(1).replace(/\.0$/, '')} h`;
}
