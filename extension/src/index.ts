/**
 * The JupyterLab plugin: the XLA sidebar panel, its command, and the status-bar item.
 * (The graph MIME renderer is the separate mime.ts entry point.)
 */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, Notification } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IStatusBar } from '@jupyterlab/statusbar';

import { BridgeRegistry } from './comm';
import { ActiveKernel } from './current';
import { shortHash } from './format';
import { GraphDiffView } from './graphdiffview';
import { GraphView, JUMP_EVENT } from './graphview';
import { xlaIcon } from './icon';
import { jumpToLocation } from './jump';
import { PANEL_ID, XlaPanel } from './panel';
import { SourceLocation } from './protocol';
import { XlaStatusItem } from './statusbar';

export const OPEN_PANEL_COMMAND = 'xlalab:open-panel';

/** Asks the kernel for one of its recent graphs and opens it next to the notebook. */
async function openGraph(app: JupyterFrontEnd, active: ActiveKernel, hash: string): Promise<void> {
  const bridge = active.bridge;
  if (!bridge) {
    return;
  }
  let payload: unknown;
  try {
    payload = await bridge.request('graph', { hash, format: 'dot' });
  } catch (error) {
    Notification.error(`XLA graph ${shortHash(hash)}: ${(error as Error).message}`, { autoClose: 5000 });
    return;
  }
  const view = new GraphView();
  const widget = new MainAreaWidget({ content: view });
  widget.id = `xlalab-graph-${hash}-${Date.now()}`;
  widget.title.label = `XLA graph ${shortHash(hash)}`;
  widget.title.icon = xlaIcon;
  widget.title.closable = true;
  widget.addClass('xlalab-GraphWidget');
  app.shell.add(widget, 'main', { mode: 'split-right' });
  await view.renderPayload(payload);
}

/**
 * Opens a recompile's two graphs side by side: `before` compiled at the same place
 * earlier, `after` replaced it.
 */
async function openGraphDiff(
  app: JupyterFrontEnd,
  active: ActiveKernel,
  before: string,
  after: string,
  title: string
): Promise<void> {
  const bridge = active.bridge;
  if (!bridge) {
    return;
  }
  let payloads: unknown[];
  try {
    payloads = await Promise.all(
      [before, after].map(hash => bridge.request('graph', { hash, format: 'dot' }))
    );
  } catch (error) {
    Notification.error(
      `XLA graphs ${shortHash(before)} and ${shortHash(after)}: ${(error as Error).message}`,
      {
        autoClose: 5000
      }
    );
    return;
  }
  const view = new GraphDiffView(title);
  const widget = new MainAreaWidget({ content: view });
  widget.id = `xlalab-graph-diff-${before}-${after}-${Date.now()}`;
  widget.title.label = `XLA recompile ${shortHash(before)} → ${shortHash(after)}`;
  widget.title.icon = xlaIcon;
  widget.title.closable = true;
  widget.addClass('xlalab-GraphWidget');
  app.shell.add(widget, 'main', { mode: 'split-right' });
  await view.render(payloads[0], payloads[1]);
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'xlalab-jupyterlab:plugin',
  description: "Shows what the active notebook's xlalab kernel compiles, executes and transfers.",
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette, IStatusBar, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null,
    statusBar: IStatusBar | null,
    restorer: ILayoutRestorer | null
  ) => {
    const active = new ActiveKernel(tracker, new BridgeRegistry());

    const jumpTo = (where: SourceLocation): void => {
      const notebook = active.panel;
      if (notebook) {
        void jumpToLocation(notebook, where, id => app.shell.activateById(id));
      }
    };
    // A source link in a graph (an output, or a graph tab): the notebook that holds the
    // graph, else the active one.
    document.addEventListener(JUMP_EVENT, event => {
      const where = (event as CustomEvent<SourceLocation>).detail;
      const target = event.target as Node | null;
      const notebook = (target && tracker.find(p => p.node.contains(target))) || active.panel;
      if (notebook && where) {
        void jumpToLocation(notebook, where, id => app.shell.activateById(id));
      }
    });
    const panel = new XlaPanel(active, {
      jumpTo,
      openGraph: hash => void openGraph(app, active, hash),
      compareGraphs: (before, after, title) => void openGraphDiff(app, active, before, after, title)
    });
    panel.title.icon = xlaIcon;
    panel.title.caption = "XLA: what the notebook's kernel compiles, runs and transfers";
    app.shell.add(panel, 'right', { rank: 900 });
    restorer?.add(panel, PANEL_ID);

    app.commands.addCommand(OPEN_PANEL_COMMAND, {
      label: 'Show XLA Panel',
      caption: "Show the active notebook's XLA compiles, executions and warnings",
      icon: xlaIcon,
      execute: () => app.shell.activateById(PANEL_ID)
    });
    palette?.addItem({ command: OPEN_PANEL_COMMAND, category: 'XLA' });

    if (statusBar) {
      const item = new XlaStatusItem(active);
      item.node.addEventListener('click', () => void app.commands.execute(OPEN_PANEL_COMMAND));
      statusBar.registerStatusItem('xlalab-jupyterlab:status', {
        item,
        align: 'left',
        rank: 10,
        isActive: () => active.panel !== null,
        activeStateChanged: active.changed
      });
    }
  }
};

export default plugin;
