/**
 * What differs between two graphs compiled at the same place: the picture of a
 * recompile finding.
 *
 * The nodes of each graph are in the order the kernel linearized them (inputs before
 * their users). The two orders are aligned on op names with a longest common
 * subsequence; aligned nodes whose shapes differ are "changed", nodes left over on one
 * side are "removed" (only in the earlier graph) or "added" (only in the later one).
 */
import { GraphNode, GraphPayload } from './graphpolicy';

export type ChangeKind = 'changed' | 'added' | 'removed';

export interface NodeChange {
  kind: ChangeKind;
  /** the text drawn under the node: "was f32[16,8]", "now f32[15,8]", "new", "gone" */
  note: string;
}

export interface GraphDiff {
  before: Map<string, NodeChange>;
  after: Map<string, NodeChange>;
  /** one line per difference, for the view's summary: "aten::mm: f32[16,16] → f32[15,16]" */
  lines: string[];
}

/** Above this many nodes a side, the quadratic alignment is skipped: positions are compared. */
const MAX_ALIGN = 2000;

/** A shape without its layout: `f32[16,8]{1,0}` -> `f32[16,8]`. */
export function bareShape(shape: string): string {
  return shape.replace(/\{[\d,]*\}$/, '');
}

/** Index pairs of a longest common subsequence of `a` and `b` under `same`. */
function align<T>(a: T[], b: T[], same: (x: T, y: T) => boolean): [number, number][] {
  const n = a.length;
  const m = b.length;
  if (n > MAX_ALIGN || m > MAX_ALIGN) {
    const pairs: [number, number][] = [];
    for (let i = 0; i < Math.min(n, m); i++) {
      if (same(a[i], b[i])) {
        pairs.push([i, i]);
      }
    }
    return pairs;
  }
  // lengths[i][j]: LCS of a[i:] and b[j:], one flat array.
  const width = m + 1;
  const lengths = new Uint16Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lengths[i * width + j] = same(a[i], b[j])
        ? lengths[(i + 1) * width + j + 1] + 1
        : Math.max(lengths[(i + 1) * width + j], lengths[i * width + j + 1]);
    }
  }
  const pairs: [number, number][] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (same(a[i], b[j])) {
      pairs.push([i, j]);
      i += 1;
      j += 1;
    } else if (lengths[(i + 1) * width + j] >= lengths[i * width + j + 1]) {
      i += 1;
    } else {
      j += 1;
    }
  }
  return pairs;
}

export function diffGraphs(before: GraphPayload, after: GraphPayload): GraphDiff {
  const a = before.nodes;
  const b = after.nodes;
  const pairs = align<GraphNode>(a, b, (x, y) => x.op === y.op);
  const diff: GraphDiff = { before: new Map(), after: new Map(), lines: [] };
  const matchedA = new Set<number>();
  const matchedB = new Set<number>();
  for (const [i, j] of pairs) {
    matchedA.add(i);
    matchedB.add(j);
    const was = bareShape(a[i].shape);
    const now = bareShape(b[j].shape);
    if (was !== now) {
      diff.before.set(a[i].id, { kind: 'changed', note: `now ${now}` });
      diff.after.set(b[j].id, { kind: 'changed', note: `was ${was}` });
      diff.lines.push(`${b[j].op}: ${was} → ${now}`);
    }
  }
  a.forEach((node, i) => {
    if (!matchedA.has(i)) {
      diff.before.set(node.id, { kind: 'removed', note: 'not in the later graph' });
      diff.lines.push(`${node.op} ${bareShape(node.shape)}: only in the earlier graph`);
    }
  });
  b.forEach((node, j) => {
    if (!matchedB.has(j)) {
      diff.after.set(node.id, { kind: 'added', note: 'not in the earlier graph' });
      diff.lines.push(`${node.op} ${bareShape(node.shape)}: only in the later graph`);
    }
  });
  return diff;
}
