/**
 * What the extension knows about one kernel connection: the protocol state machine.
 *
 * No DOM and no JupyterLab here, so the whole protocol behaviour is unit-tested in
 * node. The comm layer (comm.ts) feeds it messages and kernel status changes; views
 * subscribe and read.
 */
import {
  PROTOCOL_VERSION,
  Hello,
  RuntimeInfo,
  Snapshot,
  SourceLocation,
  XlaEvent,
  XlaWarning,
  emptySnapshot,
  isObject,
  num,
  readEvent,
  readHello,
  readRuntime,
  readSnapshot,
  readWarning,
  str
} from './protocol';
import { Clock, Throttle, realClock } from './throttle';

export type ConnectionStatus =
  /** waiting for the kernel to answer our hello */
  | 'probing'
  /** the kernel has no xlalab loaded (it closed our comm) */
  | 'not-enabled'
  /** a hello arrived */
  | 'connected'
  /** the kernel speaks a newer protocol */
  | 'mismatch'
  | 'restarting'
  | 'dead';

export interface CompileInProgress {
  graphHash: string;
  numNodes: number | null;
  reason: string;
  device: string;
  /** kernel clock (Unix seconds) of the compile_start event */
  startTime: number;
  where: SourceLocation | null;
}

/** Event kinds the timeline draws; others are not kept. */
const TIMELINE_KINDS = new Set([
  'compile_start',
  'compile',
  'execute',
  'transfer',
  'fallback',
  'sync',
  'region'
]);

/** The timeline keeps the last this many events (any age); older ones are dropped. */
export const MAX_TIMELINE_EVENTS = 5000;

/** One card of the warning list: the warnings of one kind and title at one line, merged. */
export interface WarningCard extends XlaWarning {
  /** the merged warnings, oldest first (one for most cards) */
  variants: XlaWarning[];
}

function placeKey(w: XlaWarning): string | null {
  const where = w.where;
  if (!where) {
    return null;
  }
  const cell = where.cell ? (where.cell.cell_id ?? `[${where.cell.execution_count}]`) : '';
  return `${w.category}\u0000${w.title}\u0000${cell}\u0000${where.file}\u0000${where.line}`;
}

/**
 * Merges warnings that say the same thing about the same line into one card, newest
 * first. The kernel keeps one warning per distinct change ("keep: s64[8,1] → s64[7,1]",
 * then "s64[7,1] → s64[5,1]"); to a reader those are one recompiling line, counted.
 */
export function groupWarnings(warnings: XlaWarning[]): WarningCard[] {
  const groups = new Map<string, XlaWarning[]>();
  for (const w of [...warnings].sort((a, b) => a.id - b.id)) {
    const key = placeKey(w) ?? `id\u0000${w.id}`;
    const group = groups.get(key);
    if (group) {
      group.push(w);
    } else {
      groups.set(key, [w]);
    }
  }
  const cards: WarningCard[] = [];
  for (const variants of groups.values()) {
    const newest = variants[variants.length - 1];
    const before = variants.length > 1 ? variants[variants.length - 2] : null;
    cards.push({
      ...newest,
      count: variants.reduce((sum, w) => sum + w.count, 0),
      previous_graph_hash: newest.previous_graph_hash ?? before?.graph_hash ?? null,
      variants
    });
  }
  return cards.sort((a, b) => b.id - a.id);
}

export interface KernelModelOptions {
  /** at most one change notification per this many ms (default 100) */
  notifyIntervalMs?: number;
  clock?: Clock;
}

export class KernelModel {
  status: ConnectionStatus = 'probing';
  hello: Hello | null = null;
  /** where the kernel runs; the hello's, then the latest update's */
  runtime: RuntimeInfo | null = null;
  /** the user-facing text for status 'mismatch' */
  mismatchMessage = '';
  snapshot: Snapshot = emptySnapshot();
  /** timeline events, oldest first */
  events: XlaEvent[] = [];
  compiling: CompileInProgress | null = null;
  /** events the kernel left out of updates (its 200-per-update cap) */
  droppedEvents = 0;
  /** updates we never saw (a gap in `seq`) */
  missedUpdates = 0;
  /** bumped on every reset (hello, restart), so views can drop what they cached */
  generation = 0;
  /** bumped whenever the warning list changes, so views rebuild it only then */
  warningsVersion = 0;
  /** bumped on every clear (ours or another page's), so views drop what they showed */
  clears = 0;

  private _warnings = new Map<number, XlaWarning>();
  private _lastSeq: number | null = null;
  /** local clock minus kernel clock, seconds; measured from each message's `time` */
  private _clockOffset = 0;
  private _listeners = new Set<() => void>();
  private _throttle: Throttle;
  private _clock: Clock;

  constructor(options: KernelModelOptions = {}) {
    this._clock = options.clock ?? realClock;
    this._throttle = new Throttle(() => this._notify(), options.notifyIntervalMs ?? 100, this._clock);
  }

  /** Calls `listener` after changes (coalesced); returns the unsubscribe function. */
  subscribe(listener: () => void): () => void {
    this._listeners.add(listener);
    return () => this._listeners.delete(listener);
  }

  dispose(): void {
    this._throttle.cancel();
    this._listeners.clear();
  }

  // -------------------------------------------------------------------------
  // Reading

  /** Warnings, newest first. */
  warningList(): XlaWarning[] {
    return [...this._warnings.values()].sort((a, b) => b.id - a.id);
  }

  /** The warning list's cards: one per line and kind of finding, newest first. */
  warningCards(): WarningCard[] {
    return groupWarnings([...this._warnings.values()]);
  }

  /** [op, count] pairs, most frequent first. */
  fallbackList(): [string, number][] {
    return Object.entries(this.snapshot.fallbacks)
      .filter(([, count]) => count > 0)
      .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  }

  fallbackTotal(): number {
    return Object.values(this.snapshot.fallbacks).reduce((sum, n) => sum + n, 0);
  }

  /** The kernel's clock now, estimated from the local clock. */
  kernelNow(): number {
    return this._clock.now() / 1000 - this._clockOffset;
  }

  /** Seconds the compile in progress has been running, or null. */
  compilingSeconds(): number | null {
    if (!this.compiling) {
      return null;
    }
    return Math.max(0, this.kernelNow() - this.compiling.startTime);
  }

  // -------------------------------------------------------------------------
  // Kernel lifecycle, driven by the comm layer

  /** We (re)sent our hello and wait for the answer. */
  setProbing(): void {
    if (this.status !== 'connected' && this.status !== 'mismatch') {
      this._reset('probing');
      this._changed();
    }
  }

  /** The kernel closed the comm: no xlalab there (or it was unloaded). */
  setNotEnabled(): void {
    this._reset('not-enabled');
    this._changed();
  }

  setRestarting(): void {
    this._reset('restarting');
    this._changed();
  }

  setDead(): void {
    this._reset('dead');
    this._changed();
  }

  /**
   * The kernel went idle. A compile blocks the kernel, so an idle kernel is not
   * compiling: this clears an in-progress marker whose `compile` event never came
   * (the compile raised).
   */
  kernelIdle(): void {
    if (this.compiling) {
      this.compiling = null;
      this._changed();
    }
  }

  /** Our own `clear` request succeeded: the kernel dropped its warnings too. */
  cleared(): void {
    this._forgetShown();
    this._changed();
  }

  private _forgetShown(): void {
    this.clears += 1;
    this._warnings.clear();
    this.warningsVersion += 1;
    this.events = [];
    this.compiling = null;
    this.droppedEvents = 0;
  }

  /** A snapshot that came as the result of a `snapshot` request. */
  applySnapshot(raw: unknown): void {
    if (this.status !== 'connected' || !isObject(raw)) {
      return;
    }
    this.snapshot = readSnapshot(raw);
    this._measureClock(this.snapshot.time);
    this._changed();
  }

  // -------------------------------------------------------------------------
  // Messages

  /**
   * Applies one message body from the comm. Returns false when it was ignored
   * (malformed, unknown type, out of order, or a newer protocol).
   */
  handleMessage(data: unknown): boolean {
    if (!isObject(data) || typeof data.v !== 'number' || data.v < 1) {
      return false;
    }
    if (data.v > PROTOCOL_VERSION) {
      const version = str(data.xlalab) || this.hello?.xlalab || '?';
      this._reset('mismatch');
      this.mismatchMessage = `xlalab ${version} in the kernel speaks protocol ${data.v}; update the extension`;
      this._changed();
      return false;
    }
    switch (data.type) {
      case 'hello':
        this._applyHello(data);
        return true;
      case 'update':
        return this._applyUpdate(data);
      default:
        return false;
    }
  }

  private _applyHello(data: Record<string, unknown>): void {
    this._reset('connected');
    this.hello = readHello(data);
    this.runtime = this.hello.runtime;
    this.snapshot = readSnapshot(data.snapshot);
    this._measureClock(this.snapshot.time);
    if (Array.isArray(data.warnings)) {
      for (const raw of data.warnings) {
        this._upsertWarning(readWarning(raw));
      }
    }
    this._changed();
  }

  private _applyUpdate(data: Record<string, unknown>): boolean {
    if (this.status !== 'connected') {
      return false;
    }
    const seq = typeof data.seq === 'number' ? data.seq : null;
    if (seq !== null && this._lastSeq !== null) {
      if (seq <= this._lastSeq) {
        return false; // a duplicate or a stale message
      }
      this.missedUpdates += seq - this._lastSeq - 1;
    }
    if (seq !== null) {
      this._lastSeq = seq;
    }
    this._measureClock(num(data.time));
    if (data.snapshot !== undefined) {
      this.snapshot = readSnapshot(data.snapshot);
    }
    this.droppedEvents += num(data.dropped);
    const runtime = readRuntime(data.runtime);
    if (runtime) {
      this.runtime = runtime;
    }
    if (data.cleared === true) {
      // Some frontend asked the kernel to clear: what this panel showed is gone there too.
      this._forgetShown();
    }
    if (Array.isArray(data.events)) {
      for (const raw of data.events) {
        const event = readEvent(raw);
        if (event) {
          this._applyEvent(event);
        }
      }
    }
    if (this.events.length > MAX_TIMELINE_EVENTS) {
      this.events.splice(0, this.events.length - MAX_TIMELINE_EVENTS);
    }
    this._changed();
    return true;
  }

  private _applyEvent(event: XlaEvent): void {
    if (event.kind === 'warning') {
      this._upsertWarning(event.warning ?? null);
      return;
    }
    if (event.kind === 'compile_start') {
      this.compiling = {
        graphHash: event.graph_hash ?? '',
        numNodes: event.num_nodes ?? null,
        reason: event.reason ?? '',
        device: event.device ?? '',
        startTime: event.time,
        where: event.where
      };
    } else if ((event.kind === 'compile' || event.kind === 'compile_error') && this.compiling) {
      if (!event.graph_hash || !this.compiling.graphHash || event.graph_hash === this.compiling.graphHash) {
        this.compiling = null;
      }
    }
    if (TIMELINE_KINDS.has(event.kind)) {
      this.events.push(event);
    }
  }

  private _upsertWarning(warning: XlaWarning | null): void {
    if (warning) {
      this._warnings.set(warning.id, warning);
      this.warningsVersion += 1;
    }
  }

  private _measureClock(kernelTime: number): void {
    if (kernelTime > 0) {
      this._clockOffset = this._clock.now() / 1000 - kernelTime;
    }
  }

  /** Forgets everything about the kernel; the caller notifies. */
  private _reset(status: ConnectionStatus): void {
    this.status = status;
    this.hello = null;
    this.runtime = null;
    this.mismatchMessage = '';
    this.snapshot = emptySnapshot();
    this.events = [];
    this.compiling = null;
    this.droppedEvents = 0;
    this.missedUpdates = 0;
    this._warnings.clear();
    this.warningsVersion += 1;
    this._lastSeq = null;
    this.generation += 1;
  }

  private _changed(): void {
    this._throttle.schedule();
  }

  private _notify(): void {
    for (const listener of [...this._listeners]) {
      listener();
    }
  }
}
