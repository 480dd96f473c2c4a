/**
 * Which kernel the panel and the status bar show: the active notebook's.
 *
 * Follows the notebook tracker (another notebook became current, the last one closed)
 * and the current notebook's session (its kernel was changed or shut down), and
 * makes sure every open notebook's kernel has a bridge, so a notebook in the
 * background keeps recording while another one is shown.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISignal, Signal } from '@lumino/signaling';

import { BridgeRegistry, KernelBridge } from './comm';

export class ActiveKernel {
  private _changed = new Signal<this, void>(this);
  private _panel: NotebookPanel | null = null;
  private _bridge: KernelBridge | null = null;

  constructor(
    private readonly _tracker: INotebookTracker,
    private readonly _registry: BridgeRegistry
  ) {
    _tracker.widgetAdded.connect((_, panel) => this._watch(panel));
    _tracker.forEach(panel => this._watch(panel));
    _tracker.currentChanged.connect(this._update, this);
    this._update();
  }

  /** Emitted when the notebook or its bridge changed. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get panel(): NotebookPanel | null {
    return this._panel;
  }

  get bridge(): KernelBridge | null {
    return this._bridge;
  }

  private _watch(panel: NotebookPanel): void {
    const session = panel.sessionContext;
    const onKernel = (): void => {
      this._registry.bridgeFor(session.session?.kernel);
      if (panel === this._tracker.currentWidget) {
        this._update();
      }
    };
    session.kernelChanged.connect(onKernel);
    // A restart keeps the kernel connection (and its bridge, which re-probes); a
    // shutdown disposes it, and the status change is where we learn to drop it.
    session.statusChanged.connect((_: ISessionContext, status) => {
      if (status === 'dead' || status === 'unknown') {
        onKernel();
      }
    });
    panel.disposed.connect(() => {
      session.kernelChanged.disconnect(onKernel);
    });
    onKernel();
  }

  private _update(): void {
    const panel = this._tracker.currentWidget;
    const bridge = panel ? this._registry.bridgeFor(panel.sessionContext.session?.kernel) : null;
    if (panel === this._panel && bridge === this._bridge) {
      return;
    }
    this._panel = panel;
    this._bridge = bridge;
    this._changed.emit();
  }
}
