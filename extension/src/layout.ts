/**
 * Lays out dot text into SVG text with WebAssembly Graphviz, off the main thread.
 *
 * Each layout gets its own worker, terminated when it answers or when it runs past
 * the time limit (a worker is the only thing that can be interrupted mid-layout).
 * At most two run at once, so a notebook with many graphs opens without spawning a
 * worker per output. The Graphviz wasm is inlined in the bundle: nothing is fetched
 * from the network.
 */

export interface LayoutRequest {
  dot: string;
}

export type LayoutReply = { ok: true; svg: string } | { ok: false; error: string };

export const LAYOUT_TIMEOUT_MS = 20_000;
const MAX_CONCURRENT = 2;
/** Without workers (a locked-down page) only small graphs are laid out on the main thread. */
const MAIN_THREAD_MAX_DOT_CHARS = 60_000;

export class LayoutError extends Error {}

let running = 0;
const waiting: (() => void)[] = [];

async function withSlot<T>(job: () => Promise<T>): Promise<T> {
  if (running >= MAX_CONCURRENT) {
    await new Promise<void>(resolve => waiting.push(resolve));
  }
  running += 1;
  try {
    return await job();
  } finally {
    running -= 1;
    waiting.shift()?.();
  }
}

function createWorker(): Worker | null {
  try {
    // webpack turns this into a separate worker bundle.
    return new Worker(new URL('./layoutworker.js', import.meta.url));
  } catch {
    return null;
  }
}

async function layoutOnMainThread(dot: string): Promise<string> {
  if (dot.length > MAIN_THREAD_MAX_DOT_CHARS) {
    throw new LayoutError('web workers are unavailable, and the graph is too large to lay out without one');
  }
  const { Graphviz } = await import('@hpcc-js/wasm-graphviz');
  const graphviz = await Graphviz.load();
  return graphviz.dot(dot, 'svg');
}

function layoutInWorker(worker: Worker, dot: string, timeoutMs: number): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const finish = (): void => {
      clearTimeout(timer);
      worker.terminate();
    };
    const timer = setTimeout(() => {
      finish();
      reject(
        new LayoutError(`the layout took longer than ${Math.round(timeoutMs / 1000)} s and was stopped`)
      );
    }, timeoutMs);
    worker.onmessage = (event: MessageEvent<LayoutReply>) => {
      finish();
      if (event.data.ok) {
        resolve(event.data.svg);
      } else {
        reject(new LayoutError(`Graphviz could not lay out the graph: ${event.data.error}`));
      }
    };
    worker.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      finish();
      // The worker script itself failed to load: try once without a worker.
      layoutOnMainThread(dot).then(resolve, reject);
    };
    worker.postMessage({ dot } satisfies LayoutRequest);
  });
}

/** Resolves with Graphviz's SVG text for `dot`; rejects with a LayoutError. */
export function layoutDot(dot: string, timeoutMs = LAYOUT_TIMEOUT_MS): Promise<string> {
  return withSlot(() => {
    const worker = createWorker();
    return worker ? layoutInWorker(worker, dot, timeoutMs) : layoutOnMainThread(dot);
  });
}
