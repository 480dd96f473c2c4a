/**
 * The comm side of one kernel connection: opens and adopts `xlalab` comms, feeds the
 * model, follows restarts, and sends requests.
 *
 * One bridge (and so one model) per kernel connection: two notebooks on two kernels
 * never share numbers, and a restarted or replaced kernel starts from a clean model.
 */
import { Kernel, KernelMessage } from '@jupyterlab/services';

import { KernelModel } from './model';
import { COMM_TARGET, PROTOCOL_VERSION, isObject } from './protocol';

/** How long a request may wait for its reply. */
const REQUEST_TIMEOUT_MS = 30_000;

interface PendingRequest {
  resolve: (result: unknown) => void;
  reject: (error: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

export class KernelBridge {
  readonly model = new KernelModel();

  /** the comm whose messages we read; others are ignored (see `_adopt`) */
  private _active: Kernel.IComm | null = null;
  /** whether `_active` is our own probe (ours to close) or the kernel's */
  private _activeIsOurs = false;
  private _requestId = 0;
  private _pending = new Map<number, PendingRequest>();
  private _waitingForRestart = false;
  private _disposed = false;

  constructor(readonly kernel: Kernel.IKernelConnection) {
    kernel.registerCommTarget(COMM_TARGET, this._onKernelOpen);
    kernel.statusChanged.connect(this._onStatus, this);
    kernel.disposed.connect(this.dispose, this);
    this.probe();
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._rejectAll('the kernel connection went away');
    if (!this.kernel.isDisposed) {
      this.kernel.removeCommTarget(COMM_TARGET, this._onKernelOpen);
      this.kernel.statusChanged.disconnect(this._onStatus, this);
      this.kernel.disposed.disconnect(this.dispose, this);
      if (this._active && this._activeIsOurs && !this._active.isDisposed) {
        this._active.close();
      }
    }
    this._active = null;
    this.model.dispose();
  }

  /**
   * Sends our hello on a new comm. xlalab answers with a hello; a kernel without it
   * closes the comm at once ("No such comm target").
   */
  probe(): void {
    if (this._disposed) {
      return;
    }
    let comm: Kernel.IComm;
    try {
      comm = this.kernel.createComm(COMM_TARGET);
    } catch {
      // Comms are disabled on this connection: nothing can ever arrive.
      this.model.setNotEnabled();
      return;
    }
    this.model.setProbing();
    this._adopt(comm, true);
    try {
      comm.open({ v: PROTOCOL_VERSION, type: 'hello' });
    } catch {
      // The kernel is dead; its status change will say so.
      this._active = null;
    }
  }

  /**
   * Asks the kernel for something (`snapshot`, `graph`, `metrics_report`, `warnings`,
   * `clear`); resolves with the reply's `result`, rejects with its `error`.
   */
  request(what: string, extra: Record<string, unknown> = {}): Promise<unknown> {
    const comm = this._active;
    if (!comm || comm.isDisposed || this.model.status !== 'connected') {
      return Promise.reject(new Error('xlalab is not connected to this kernel'));
    }
    const id = ++this._requestId;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this._pending.delete(id);
        reject(new Error(`the kernel did not answer the ${what} request`));
      }, REQUEST_TIMEOUT_MS);
      this._pending.set(id, { resolve, reject, timer });
      comm.send({ ...extra, v: PROTOCOL_VERSION, type: 'request', id, what });
    }).then(result => {
      if (what === 'clear') {
        // The update that follows a clear carries only the snapshot; dropping our
        // warnings and events is on us.
        this.model.cleared();
      }
      return result;
    });
  }

  // -------------------------------------------------------------------------

  /** `%load_ext xlalab` opened a comm to us, with a hello as its open data. */
  private _onKernelOpen = (comm: Kernel.IComm, msg: KernelMessage.ICommOpenMsg): void => {
    if (this._disposed) {
      return;
    }
    this._adopt(comm, false);
    this.model.handleMessage(msg.content.data);
  };

  /**
   * Makes `comm` the one we read. The kernel broadcasts to every comm it holds, so
   * reading two would count every event twice. A previous probe of ours is closed;
   * a previous kernel-opened comm is left open (other tabs may share it) but ignored.
   */
  private _adopt(comm: Kernel.IComm, ours: boolean): void {
    const previous = this._active;
    if (previous && previous !== comm) {
      previous.onMsg = () => undefined;
      previous.onClose = () => undefined;
      if (this._activeIsOurs && !previous.isDisposed) {
        previous.close();
      }
    }
    this._rejectAll('the comm was replaced');
    this._active = comm;
    this._activeIsOurs = ours;
    comm.onMsg = msg => this._onMessage(comm, msg);
    comm.onClose = () => this._onClose(comm);
  }

  private _onMessage(comm: Kernel.IComm, msg: KernelMessage.ICommMsgMsg): void {
    if (comm !== this._active) {
      return;
    }
    const data = msg.content.data;
    if (isObject(data) && data.type === 'reply') {
      this._onReply(data);
      return;
    }
    this.model.handleMessage(data);
  }

  private _onReply(data: Record<string, unknown>): void {
    const pending = typeof data.id === 'number' ? this._pending.get(data.id) : undefined;
    if (!pending || typeof data.id !== 'number') {
      return;
    }
    this._pending.delete(data.id);
    clearTimeout(pending.timer);
    if (data.ok === true) {
      pending.resolve(data.result);
    } else {
      pending.reject(new Error(typeof data.error === 'string' ? data.error : 'the request failed'));
    }
  }

  private _onClose(comm: Kernel.IComm): void {
    if (comm !== this._active) {
      return;
    }
    this._active = null;
    this._rejectAll('xlalab closed the comm');
    // A closed comm after a restart is the old kernel's; the restart handler re-probes.
    if (!this._waitingForRestart) {
      this.model.setNotEnabled();
    }
  }

  private _onStatus(_: Kernel.IKernelConnection, status: Kernel.Status): void {
    switch (status) {
      case 'restarting':
      case 'autorestarting':
        // The kernel's comms die with it; JupyterLab disposes them without an onClose.
        this._waitingForRestart = true;
        this._active = null;
        this._rejectAll('the kernel restarted');
        this.model.setRestarting();
        break;
      case 'dead':
        this._active = null;
        this._rejectAll('the kernel died');
        this.model.setDead();
        break;
      case 'idle':
        this.model.kernelIdle();
        if (this._waitingForRestart) {
          this._waitingForRestart = false;
          this.probe();
        }
        break;
      default:
        break;
    }
  }

  private _rejectAll(reason: string): void {
    for (const [id, pending] of this._pending) {
      clearTimeout(pending.timer);
      pending.reject(new Error(reason));
      this._pending.delete(id);
    }
  }
}

/**
 * Hands out the bridge of a kernel connection, creating it on first use. Bridges
 * dispose themselves with their kernel connection.
 */
export class BridgeRegistry {
  private _bridges = new Map<Kernel.IKernelConnection, KernelBridge>();

  bridgeFor(kernel: Kernel.IKernelConnection | null | undefined): KernelBridge | null {
    if (!kernel || kernel.isDisposed) {
      return null;
    }
    let bridge = this._bridges.get(kernel);
    if (!bridge || bridge.isDisposed) {
      bridge = new KernelBridge(kernel);
      this._bridges.set(kernel, bridge);
      kernel.disposed.connect(() => this._bridges.delete(kernel));
    }
    return bridge;
  }
}
