/**
 * The MIME renderer extension for `application/vnd.xlalab.graph+json`
 * (package.json's `jupyterlab.mimeExtension`).
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';

import { GRAPH_MIME } from './graphpolicy';
import { graphRendererFactory } from './graphview';

const extension: IRenderMime.IExtension = {
  id: 'xlalab-jupyterlab:graph',
  description: 'Renders xlalab IR graphs with WebAssembly Graphviz.',
  rendererFactory: graphRendererFactory,
  // Preferred over the image/svg+xml and text/plain parts of the same bundle.
  rank: 0,
  dataType: 'json'
};

export { GRAPH_MIME };
export default extension;
