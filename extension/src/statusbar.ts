/**
 * The status-bar item for the active notebook's kernel: "XLA: 3 compiles" (uncached),
 * or what keeps it from counting ("XLA: not loaded" for a kernel without xlalab).
 */
import { Widget } from '@lumino/widgets';

import { ActiveKernel } from './current';
import { setText } from './dom';
import { countOf } from './format';
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
    const status = model?.status ?? 'no-kernel';
    let text: string;
    let title: string;
    switch (status) {
      case 'connected':
        text = `XLA: ${countOf(model!.snapshot.compiles.uncached, 'compile')}`;
        title =
          `${countOf(model!.snapshot.compiles.cached, 'cached compile')} too; ` + 'click for the XLA panel';
        break;
      case 'not-enabled':
        text = 'XLA: not loaded';
        title =
          'xlalab is not loaded in this kernel: run %load_ext xlalab in a cell. Click for the XLA panel';
        break;
      case 'probing':
        text = 'XLA: …';
        title = 'asking the kernel whether xlalab is loaded';
        break;
      case 'mismatch':
        text = 'XLA: update the extension';
        title = model!.mismatchMessage;
        break;
      case 'restarting':
        text = 'XLA: restarting';
        title = 'the kernel is restarting';
        break;
      default:
        text = 'XLA: no kernel';
        title = 'this notebook has no running kernel';
    }
    setText(this.node, text);
    this.node.dataset.status = status;
    this.node.classList.toggle('xlalab-mod-inactive', status !== 'connected');
    this.node.title = title;
  }
}
