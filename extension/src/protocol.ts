/**
 * The message shapes of the xlalab comm protocol, version 1 (docs/lab-protocol.md),
 * and the functions that turn untrusted JSON into them.
 *
 * Everything that arrives from the kernel goes through a `read*` function here: the
 * kernel is another program, so a missing or mistyped field becomes a safe default
 * instead of an exception in the middle of rendering.
 */

import { SpmdUsage, readSpmdUsage } from './devicememory';

/** The protocol version this extension speaks. */
export const PROTOCOL_VERSION = 1;

/** The comm target name, used in both directions. */
export const COMM_TARGET = 'xlalab';

export interface CellRef {
  execution_count: number | null;
  cell_id: string | null;
}

export interface SourceLocation {
  file: string;
  line: number;
  function: string;
  label: string;
  cell: CellRef | null;
}

export interface CompileTotals {
  uncached: number;
  cached: number;
  seconds_total: number;
  seconds_last: number;
}

/** Compiled mode's counts: graphs dynamo handed to the backend, and how many a failed guard caused */
export interface DynamoTotals {
  graphs: number;
  recompiles: number;
}

export interface Snapshot {
  time: number;
  compiles: CompileTotals;
  /** from the snapshot's `counters` (DynamoExtractCompiledGraph, DynamoRecompile) */
  dynamo: DynamoTotals;
  executions: { count: number; seconds_total: number };
  transfers: {
    to_device: number;
    from_device: number;
    bytes_to_device: number;
    bytes_from_device: number;
  };
  /** op name -> how often it ran on the CPU */
  fallbacks: Record<string, number>;
  /** SPMD mode: live data per device and the collectives' share (devicememory.ts); else null */
  spmd: SpmdUsage | null;
}

export type WarningCategory =
  'recompile' | 'fallback' | 'transfer' | 'no_barrier' | 'graph_break' | 'reshard' | 'other';

export interface XlaWarning {
  id: number;
  category: WarningCategory;
  title: string;
  message: string;
  where: SourceLocation | null;
  frames: SourceLocation[];
  count: number;
  graph_hash: string | null;
  /** recompiles: the graph compiled at the same place before this one, when the kernel says */
  previous_graph_hash: string | null;
  /** more lines of explanation (where the shape was uploaded, what to do) */
  details: string[];
}

/** One event of an `update`; `kind`-specific fields stay as sent. */
export interface XlaEvent {
  kind: string;
  time: number;
  where: SourceLocation | null;
  graph_hash?: string;
  num_nodes?: number;
  seconds?: number;
  cached?: boolean;
  device?: string;
  reason?: string;
  direction?: string;
  nbytes?: number;
  op?: string;
  warning?: XlaWarning;
  /** region events (a profiler region's start or end): its name, phase, pairing id, nesting, step */
  name?: string;
  phase?: string;
  region?: number;
  depth?: number;
  step?: number;
}

/** Where the kernel runs (the `runtime` object of hello and update messages). */
export interface RuntimeInfo {
  /** false until the user's code started the device backend; the fields below it are then empty */
  started: boolean;
  platform: string;
  /** torch_xla's hardware name: CPU, CUDA, TPU */
  hw: string;
  device_count: number;
  /** what JAX calls the device (`cpu`, `NVIDIA H100 80GB HBM3`, `TPU v4`) */
  device_kind: string;
  jax: string;
  torch: string;
  /** the persistent compilation cache's directory, or null when it is off */
  compile_cache_dir: string | null;
}

export interface Hello {
  xlalab: string;
  pid: number | null;
  platform: string;
  devices: string[];
  settings: Record<string, unknown>;
  runtime: RuntimeInfo | null;
}

// ---------------------------------------------------------------------------
// Readers: untrusted JSON -> typed values with defaults.

type Json = Record<string, unknown>;

export function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function num(value: unknown, fallback = 0): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : fallback;
}

export function str(value: unknown, fallback = ''): string {
  return typeof value === 'string' ? value : fallback;
}

function strOrNull(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

export function readCellRef(value: unknown): CellRef | null {
  if (!isObject(value)) {
    return null;
  }
  const count = value.execution_count;
  return {
    execution_count: typeof count === 'number' && Number.isFinite(count) ? count : null,
    cell_id: strOrNull(value.cell_id)
  };
}

export function readLocation(value: unknown): SourceLocation | null {
  if (!isObject(value)) {
    return null;
  }
  const file = str(value.file);
  const line = num(value.line);
  return {
    file,
    line,
    function: str(value.function),
    label: str(value.label) || (file ? `${file}:${line}` : ''),
    cell: readCellRef(value.cell)
  };
}

export function emptySnapshot(): Snapshot {
  return {
    time: 0,
    compiles: { uncached: 0, cached: 0, seconds_total: 0, seconds_last: 0 },
    dynamo: { graphs: 0, recompiles: 0 },
    executions: { count: 0, seconds_total: 0 },
    transfers: { to_device: 0, from_device: 0, bytes_to_device: 0, bytes_from_device: 0 },
    fallbacks: {},
    spmd: null
  };
}

export function readSnapshot(value: unknown): Snapshot {
  const snap = emptySnapshot();
  if (!isObject(value)) {
    return snap;
  }
  snap.time = num(value.time);
  const c = isObject(value.compiles) ? value.compiles : {};
  snap.compiles = {
    uncached: num(c.uncached),
    cached: num(c.cached),
    seconds_total: num(c.seconds_total),
    seconds_last: num(c.seconds_last)
  };
  const counters = isObject(value.counters) ? value.counters : {};
  snap.dynamo = {
    graphs: num(counters.DynamoExtractCompiledGraph),
    recompiles: num(counters.DynamoRecompile)
  };
  const e = isObject(value.executions) ? value.executions : {};
  snap.executions = { count: num(e.count), seconds_total: num(e.seconds_total) };
  const t = isObject(value.transfers) ? value.transfers : {};
  snap.transfers = {
    to_device: num(t.to_device),
    from_device: num(t.from_device),
    bytes_to_device: num(t.bytes_to_device),
    bytes_from_device: num(t.bytes_from_device)
  };
  if (isObject(value.fallbacks)) {
    // A plain object keyed by op names from the kernel: copy into a prototype-less
    // map so an op called "__proto__" stays an ordinary key.
    const fallbacks: Record<string, number> = Object.create(null);
    for (const [op, count] of Object.entries(value.fallbacks)) {
      fallbacks[op] = num(count);
    }
    snap.fallbacks = fallbacks;
  }
  snap.spmd = readSpmdUsage(value.spmd);
  return snap;
}

const CATEGORIES: readonly string[] = [
  'recompile',
  'fallback',
  'transfer',
  'no_barrier',
  'graph_break',
  'reshard'
];

export function readWarning(value: unknown): XlaWarning | null {
  if (!isObject(value) || typeof value.id !== 'number') {
    return null;
  }
  const category = str(value.category);
  const where = readLocation(value.where);
  const frames = Array.isArray(value.frames)
    ? value.frames.map(readLocation).filter((f): f is SourceLocation => f !== null)
    : [];
  // The warning's own `cell` backs up a `where` that lacks one.
  const cell = readCellRef(value.cell);
  if (where && !where.cell && cell) {
    where.cell = cell;
  }
  return {
    id: value.id,
    // A kind this panel does not know yet is shown as what it is, never as a recompile.
    category: (CATEGORIES.includes(category) ? category : 'other') as WarningCategory,
    title: str(value.title),
    message: str(value.message),
    where,
    frames,
    count: num(value.count, 1),
    graph_hash: strOrNull(value.graph_hash) || null,
    previous_graph_hash: strOrNull(value.previous_graph_hash) || null,
    details: Array.isArray(value.details)
      ? value.details.filter((d): d is string => typeof d === 'string')
      : []
  };
}

export function readEvent(value: unknown): XlaEvent | null {
  if (!isObject(value) || typeof value.kind !== 'string') {
    return null;
  }
  const event: XlaEvent = {
    kind: value.kind,
    time: num(value.time),
    where: readLocation(value.where)
  };
  if (typeof value.graph_hash === 'string') {
    event.graph_hash = value.graph_hash;
  }
  for (const key of ['num_nodes', 'seconds', 'nbytes', 'region', 'depth', 'step'] as const) {
    if (typeof value[key] === 'number') {
      event[key] = value[key] as number;
    }
  }
  for (const key of ['device', 'reason', 'direction', 'op', 'name', 'phase'] as const) {
    if (typeof value[key] === 'string') {
      event[key] = value[key] as string;
    }
  }
  if (typeof value.cached === 'boolean') {
    event.cached = value.cached;
  }
  if (value.kind === 'warning') {
    const warning = readWarning(value.warning);
    if (warning) {
      event.warning = warning;
    }
  }
  return event;
}

export function readHello(value: Json): Hello {
  return {
    xlalab: str(value.xlalab, '?'),
    pid: typeof value.pid === 'number' ? value.pid : null,
    platform: str(value.platform),
    devices: Array.isArray(value.devices)
      ? value.devices.filter((d): d is string => typeof d === 'string')
      : [],
    settings: isObject(value.settings) ? value.settings : {},
    runtime: readRuntime(value.runtime)
  };
}

export function readRuntime(value: unknown): RuntimeInfo | null {
  if (!isObject(value)) {
    return null;
  }
  return {
    started: value.started === true,
    platform: str(value.platform),
    hw: str(value.hw),
    device_count: num(value.device_count),
    device_kind: str(value.device_kind),
    jax: str(value.jax),
    torch: str(value.torch),
    compile_cache_dir: strOrNull(value.compile_cache_dir) || null
  };
}
