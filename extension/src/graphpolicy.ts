/**
 * The graph MIME payload (`application/vnd.xlalab.graph+json`) and the decision
 * whether to lay it out or to show a summary.
 *
 * Graphviz's layout time grows much faster than linearly with the node count; a
 * 100k-node dot would hang the tab. The protocol says the extension lays out at most
 * 2,000 dot nodes; past that, or for a dot text too large to parse quickly, the
 * viewer shows the op counts table instead.
 */
import { SourceLocation, isObject, num, readLocation, str } from './protocol';

export const GRAPH_MIME = 'application/vnd.xlalab.graph+json';

export interface GraphNode {
  id: string;
  op: string;
  shape: string;
  frames: SourceLocation[];
  roots: number[];
  /** SPMD: how the node's value is split over the mesh (torch_xla's spec string) */
  sharding: string | null;
}

/** A collective XLA's partitioner inserted into the graph's compiled program. */
export interface GraphCollective {
  kind: string;
  /** its result, as HLO writes it */
  shape: string;
  /** bytes of its result on each device */
  nbytes: number;
  /** the aten op whose lowering needed it */
  op: string;
  /** the user's `file:line`, when the HLO recorded it */
  location: string;
  replica_groups: string;
  /** the shown nodes whose op could have needed it */
  nodes: string[];
}

export interface GraphPayload {
  hash: string;
  title: string;
  dot: string;
  num_nodes: number;
  shown_nodes: number;
  nodes: GraphNode[];
  op_counts: [string, number][];
  /** whether the kernel ran in SPMD mode (the payload has a `shardings` legend) */
  spmd: boolean;
  /** the shardings the shown nodes have, first seen first, with their node counts */
  shardings: { spec: string; nodes: number }[];
  /** whether the graph's compiled program was found (`collectives` is null when not) */
  compiled: boolean;
  collectives: GraphCollective[];
}

function readCollective(raw: unknown): GraphCollective | null {
  if (!isObject(raw) || typeof raw.kind !== 'string') {
    return null;
  }
  return {
    kind: raw.kind,
    shape: str(raw.shape),
    nbytes: num(raw.nbytes),
    op: str(raw.op),
    location: str(raw.location),
    replica_groups: str(raw.replica_groups),
    nodes: Array.isArray(raw.nodes) ? raw.nodes.filter((n): n is string => typeof n === 'string') : []
  };
}

export const MAX_LAYOUT_NODES = 2000;
/** About 2,000 nodes with long labels and their edges; more dot text than this is not laid out. */
export const MAX_DOT_CHARS = 1_500_000;

export type GraphMode = { mode: 'layout' } | { mode: 'summary'; reason: string };

export function readGraphPayload(value: unknown): GraphPayload | null {
  if (!isObject(value)) {
    return null;
  }
  const nodes: GraphNode[] = [];
  if (Array.isArray(value.nodes)) {
    for (const raw of value.nodes) {
      if (!isObject(raw) || typeof raw.id !== 'string') {
        continue;
      }
      nodes.push({
        id: raw.id,
        op: str(raw.op),
        shape: str(raw.shape),
        frames: Array.isArray(raw.frames)
          ? raw.frames.map(readLocation).filter((f): f is SourceLocation => f !== null)
          : [],
        roots: Array.isArray(raw.roots) ? raw.roots.filter((r): r is number => typeof r === 'number') : [],
        sharding: typeof raw.sharding === 'string' && raw.sharding ? raw.sharding : null
      });
    }
  }
  const opCounts: [string, number][] = [];
  if (Array.isArray(value.op_counts)) {
    for (const pair of value.op_counts) {
      if (Array.isArray(pair) && typeof pair[0] === 'string') {
        opCounts.push([pair[0], num(pair[1])]);
      }
    }
  }
  const numNodes = num(value.num_nodes, nodes.length);
  return {
    hash: str(value.hash),
    title: str(value.title),
    dot: str(value.dot),
    num_nodes: numNodes,
    shown_nodes: num(value.shown_nodes, numNodes),
    nodes,
    op_counts: opCounts,
    spmd: Array.isArray(value.shardings),
    shardings: Array.isArray(value.shardings)
      ? value.shardings
          .filter(isObject)
          .filter(e => typeof e.spec === 'string')
          .map(e => ({ spec: str(e.spec), nodes: num(e.nodes) }))
      : [],
    compiled: Array.isArray(value.collectives),
    collectives: Array.isArray(value.collectives)
      ? value.collectives.map(readCollective).filter((c): c is GraphCollective => c !== null)
      : []
  };
}

/** Counts node statements in dot text: the payload's `shown_nodes` may be absent or wrong. */
export function countDotNodes(dot: string): number {
  const names = new Set<string>();
  for (const match of dot.matchAll(/^\s*"?(node\d+)"?\s*\[/gm)) {
    names.add(match[1]);
  }
  return names.size;
}

export function chooseGraphMode(
  payload: GraphPayload,
  limits = { maxNodes: MAX_LAYOUT_NODES, maxDotChars: MAX_DOT_CHARS }
): GraphMode {
  if (!payload.dot.trim()) {
    return { mode: 'summary', reason: 'The payload has no dot text.' };
  }
  if (payload.dot.length > limits.maxDotChars) {
    return {
      mode: 'summary',
      reason: `The dot text is ${payload.dot.length.toLocaleString('en-US')} characters, too large to lay out in the browser.`
    };
  }
  const shown = Math.max(payload.shown_nodes, countDotNodes(payload.dot));
  if (shown > limits.maxNodes) {
    return {
      mode: 'summary',
      reason: `The graph has ${shown.toLocaleString('en-US')} nodes; at most ${limits.maxNodes.toLocaleString('en-US')} are laid out.`
    };
  }
  return { mode: 'layout' };
}

/** A dot label: `label="..."`, with escaped quotes allowed inside. */
const LABEL = /label="((?:[^"\\]|\\.)*)"/g;

/**
 * Drawing-only tidying of the kernel's dot labels. The dump follows torch_xla's format,
 * where a node says its shape twice (`f32[2]{0}` and `xla_shape=f32[2]{0}`); drawn, the
 * second copy only makes the box bigger.
 */
export function tidyDotLabels(dot: string): string {
  return dot.replace(LABEL, (whole, text: string) => {
    const lines = text.split('\\n');
    if (lines.length < 3) {
      return whole;
    }
    const shape = lines[1];
    const kept = lines.filter((line, i) => i < 2 || line !== `xla_shape=${shape}`);
    return kept.length === lines.length ? whole : `label="${kept.join('\\n')}"`;
  });
}

function dotEscape(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, ' ');
}

/** Adds a line at the end of the labels of the nodes named in `notes` (node id -> text). */
export function annotateDot(dot: string, notes: Map<string, string>): string {
  if (!notes.size) {
    return dot;
  }
  return dot.replace(
    /^(\s*"?(node\d+)"?\s*\[)([^\n]*)$/gm,
    (whole, head: string, id: string, rest: string) => {
      const note = notes.get(id);
      if (note === undefined) {
        return whole;
      }
      const annotated = rest.replace(/label="((?:[^"\\]|\\.)*)"/, (_m, text: string) => {
        return `label="${text}\\n${dotEscape(note)}"`;
      });
      return head + annotated;
    }
  );
}
