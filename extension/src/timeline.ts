/**
 * The timeline plot: compiles, executions and host round trips on a time axis, and its
 * legend.
 *
 * `layoutTimeline` turns events into positioned marks (pure, tested); `renderTimeline`
 * draws them as SVG built element by element, with each mark's description in a
 * <title> text node (the browser shows it as a tooltip).
 */
import { s, replaceChildren } from './dom';
import { formatBytes, formatSeconds, shortHash } from './format';
import { CompileInProgress } from './model';
import { XlaEvent } from './protocol';

export type Lane = 'compile' | 'execute' | 'host';

export interface Mark {
  lane: Lane;
  /** CSS modifier: uncached, cached, compiling, execute, transfer, fallback, read, step */
  kind: string;
  x: number;
  width: number;
  title: string;
  graphHash?: string;
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
    default:
      return `${event.kind}${where}`;
  }
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
  if (compiling) {
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

  const bar = (lane: Lane, kind: string, from: number, to: number, event?: XlaEvent): void => {
    if (to < start) {
      return;
    }
    // Marks at the window's edges stay whole inside it.
    const x = Math.min(Math.max(0, px(from)), width - MIN_BAR_PX);
    marks.push({
      lane,
      kind,
      x,
      width: Math.min(Math.max(MIN_BAR_PX, px(to) - x), width - x),
      title: event ? describe(event) : '',
      graphHash: event?.graph_hash
    });
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
      default:
        break; // compile_start is drawn from `compiling` below, or by its compile
    }
  }
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

const LANE_Y: Record<Lane, number> = { compile: 4, execute: 22, host: 40 };
const LANE_HEIGHT = 14;
const AXIS_Y = 58;
export const TIMELINE_HEIGHT = 72;

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
  for (const mark of layout.marks) {
    const rect = s('rect', {
      class: `xlalab-Timeline-mark xlalab-Timeline-${mark.kind}`,
      x: mark.x.toFixed(1),
      y: LANE_Y[mark.lane] + (mark.lane === 'host' ? 3 : 0),
      width: mark.width.toFixed(1),
      height: mark.lane === 'host' ? LANE_HEIGHT - 6 : LANE_HEIGHT,
      'data-kind': mark.kind
    });
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
