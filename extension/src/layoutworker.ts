/**
 * Web worker that runs Graphviz (WebAssembly) so a slow layout never blocks the page.
 * One request per worker: the caller terminates the worker when it answers or when
 * it takes too long, which is the only way to stop a layout in progress.
 */
import { Graphviz } from '@hpcc-js/wasm-graphviz';

import type { LayoutReply, LayoutRequest } from './layout';

interface WorkerScope {
  onmessage: ((event: MessageEvent<LayoutRequest>) => void) | null;
  postMessage(message: LayoutReply): void;
}

const scope = self as unknown as WorkerScope;

scope.onmessage = async event => {
  try {
    const graphviz = await Graphviz.load();
    scope.postMessage({ ok: true, svg: graphviz.dot(event.data.dot, 'svg') });
  } catch (error) {
    scope.postMessage({ ok: false, error: error instanceof Error ? error.message : String(error) });
  }
};
