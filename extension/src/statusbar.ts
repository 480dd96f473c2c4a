/**
 * The status-bar item: "XLA: N compiles" (uncached) for the active notebook's kernel.
 */
import { Widget } from '@lumino/widgets';

import { ActiveKernel } from './current';
import { setText } from './dom';
import { formatCount } from './format';
import { KernelModel } from './model';

export class XlaStatusItem extends Widget {
  private _model: KernelModel | null = null;
  private _unsubscribe: (() => void) | null = null;

  constructor(private readonly _active: ActiveKernel) {
    super();
    this.addClass('xlalab-StatusItem');
    this.node.setAttribute('data-testid', 'xlalab-status');
    _active.changed.connect(this._follow, this);
    this._follow();
  }

  dispose(): void {
    this._unsubscribe?.();
    this._active.changed.disconnect(this._follow, this);
    super.dispose();
  }

  private _follow(): void {
    this._unsubscribe?.();
    this._model = this._active.bridge?.model ?? null;
    this._unsubscribe = this._model?.subscribe(() => this._render()) ?? null;
    this._render();
  }

  private _render(): void {
    const model = this._model;
    const connected = model?.status === 'connected';
    const count = connected ? model.snapshot.compiles.uncached : 0;
    setText(this.node, `XLA: ${formatCount(count)} compiles`);
    this.node.classList.toggle('xlalab-mod-inactive', !connected);
    this.node.title = connected
      ? `${formatCount(model.snapshot.compiles.cached)} cached compiles too; click for the XLA panel`
      : 'xlalab is not loaded in this kernel (%load_ext xlalab); click for the XLA panel';
  }
}
