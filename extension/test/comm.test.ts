import { beforeEach, describe, expect, it } from 'vitest';

import { KernelBridge } from '../src/comm';
import { hello, update, warning } from './helpers';

type Listener = (sender: unknown, value: unknown) => void;

/** Just enough of a Lumino signal for the bridge. */
class FakeSignal {
  private _listeners: { fn: Listener; thisArg: unknown }[] = [];
  connect(fn: Listener, thisArg?: unknown): void {
    this._listeners.push({ fn, thisArg });
  }
  disconnect(fn: Listener, thisArg?: unknown): void {
    this._listeners = this._listeners.filter(l => l.fn !== fn || l.thisArg !== thisArg);
  }
  emit(sender: unknown, value?: unknown): void {
    for (const l of [...this._listeners]) {
      l.fn.call(l.thisArg, sender, value);
    }
  }
}

class FakeComm {
  opened: unknown[] = [];
  sent: Record<string, unknown>[] = [];
  closed = false;
  isDisposed = false;
  onMsg: (msg: unknown) => void = () => undefined;
  onClose: (msg: unknown) => void = () => undefined;
  constructor(readonly targetName: string) {}
  open(data: unknown): void {
    this.opened.push(data);
  }
  send(data: Record<string, unknown>): void {
    this.sent.push(data);
  }
  close(): void {
    this.closed = true;
    this.isDisposed = true;
  }
  /** the kernel sends a message on this comm */
  receive(data: unknown): void {
    this.onMsg({ content: { data } });
  }
  /** the kernel closes this comm */
  kernelCloses(): void {
    this.isDisposed = true;
    this.onClose({ content: { data: {} } });
  }
}

class FakeKernel {
  statusChanged = new FakeSignal();
  disposed = new FakeSignal();
  isDisposed = false;
  targets: Record<string, (comm: FakeComm, msg: unknown) => void> = {};
  created: FakeComm[] = [];
  registerCommTarget(name: string, cb: (comm: FakeComm, msg: unknown) => void): void {
    this.targets[name] = cb;
  }
  removeCommTarget(name: string, cb: unknown): void {
    if (this.targets[name] === cb) {
      delete this.targets[name];
    }
  }
  createComm(target: string): FakeComm {
    const comm = new FakeComm(target);
    this.created.push(comm);
    return comm;
  }
  setStatus(status: string): void {
    this.statusChanged.emit(this, status);
  }
  /** `%load_ext xlalab` opens a comm with a hello */
  kernelOpens(data: unknown): FakeComm {
    const comm = new FakeComm('xlalab');
    this.targets.xlalab(comm, { content: { data } });
    return comm;
  }
  get probe(): FakeComm {
    return this.created[this.created.length - 1];
  }
}

function makeBridge(): { kernel: FakeKernel; bridge: KernelBridge } {
  const kernel = new FakeKernel();
  const bridge = new KernelBridge(kernel as never);
  return { kernel, bridge };
}

describe('KernelBridge', () => {
  let kernel: FakeKernel;
  let bridge: KernelBridge;

  beforeEach(() => {
    ({ kernel, bridge } = makeBridge());
  });

  it('registers the xlalab target and probes with a hello', () => {
    expect(kernel.targets.xlalab).toBeTypeOf('function');
    expect(kernel.probe.targetName).toBe('xlalab');
    expect(kernel.probe.opened).toEqual([{ v: 1, type: 'hello' }]);
    expect(bridge.model.status).toBe('probing');
  });

  it('a kernel without xlalab closes the probe: not enabled', () => {
    kernel.probe.kernelCloses();
    expect(bridge.model.status).toBe('not-enabled');
  });

  it('connects when the probe is answered, and follows updates', () => {
    kernel.probe.receive(hello());
    expect(bridge.model.status).toBe('connected');
    kernel.probe.receive(update(1, [{ kind: 'warning', time: 1, where: null, warning: warning(4) }]));
    expect(bridge.model.warningList().map(w => w.id)).toEqual([4]);
  });

  it('comes alive when %load_ext opens a comm after "not enabled"', () => {
    kernel.probe.kernelCloses();
    const comm = kernel.kernelOpens(hello());
    expect(bridge.model.status).toBe('connected');
    comm.receive(update(1, [{ kind: 'execute', time: 1, where: null }]));
    expect(bridge.model.events).toHaveLength(1);
    // %unload_ext closes it
    comm.kernelCloses();
    expect(bridge.model.status).toBe('not-enabled');
  });

  it('reads one comm only: a newer comm replaces the probe, which is closed and ignored', () => {
    const probe = kernel.probe;
    probe.receive(hello());
    const comm = kernel.kernelOpens(hello());
    expect(probe.closed).toBe(true);
    probe.receive(update(1, [{ kind: 'execute', time: 1, where: null }]));
    comm.receive(update(1, [{ kind: 'execute', time: 2, where: null }]));
    expect(bridge.model.events.map(e => e.time)).toEqual([2]);
  });

  it('re-probes after a restart and ignores the dead comm closing', () => {
    kernel.probe.receive(hello());
    const old = kernel.probe;
    kernel.setStatus('restarting');
    expect(bridge.model.status).toBe('restarting');
    old.kernelCloses();
    expect(bridge.model.status).toBe('restarting');
    kernel.setStatus('starting');
    kernel.setStatus('idle');
    expect(kernel.created).toHaveLength(2);
    expect(kernel.probe).not.toBe(old);
    expect(bridge.model.status).toBe('probing');
    kernel.probe.kernelCloses();
    expect(bridge.model.status).toBe('not-enabled');
  });

  it('an idle kernel ends a compile whose compile event never came', () => {
    kernel.probe.receive(hello());
    kernel.probe.receive(update(1, [{ kind: 'compile_start', time: 1, where: null, graph_hash: 'aa' }]));
    expect(bridge.model.compiling).not.toBeNull();
    kernel.setStatus('idle');
    expect(bridge.model.compiling).toBeNull();
  });

  it('sends requests and resolves them with the matching reply', async () => {
    kernel.probe.receive(hello());
    const pending = bridge.request('graph', { hash: 'ab', format: 'dot' });
    const sent = kernel.probe.sent[0];
    expect(sent).toEqual({ v: 1, type: 'request', id: 1, what: 'graph', hash: 'ab', format: 'dot' });
    kernel.probe.receive({ v: 1, type: 'reply', id: 99, ok: true, result: 'not ours' });
    kernel.probe.receive({ v: 1, type: 'reply', id: 1, ok: true, result: { dot: 'digraph {}' } });
    await expect(pending).resolves.toEqual({ dot: 'digraph {}' });
  });

  it('rejects with the kernel error, and when not connected', async () => {
    await expect(bridge.request('snapshot')).rejects.toThrow(/not connected/);
    kernel.probe.receive(hello());
    const pending = bridge.request('graph', { hash: 'zz' });
    kernel.probe.receive({ v: 1, type: 'reply', id: 1, ok: false, error: 'no graph with hash zz' });
    await expect(pending).rejects.toThrow('no graph with hash zz');
  });

  it('pending requests fail when the kernel restarts', async () => {
    kernel.probe.receive(hello());
    const pending = bridge.request('snapshot');
    kernel.setStatus('restarting');
    await expect(pending).rejects.toThrow(/restarted/);
  });

  it('a successful clear drops warnings here too', async () => {
    kernel.probe.receive(hello({ warnings: [warning(1)] }));
    const pending = bridge.request('clear');
    kernel.probe.receive({ v: 1, type: 'reply', id: 1, ok: true, result: {} });
    await pending;
    expect(bridge.model.warningList()).toHaveLength(0);
  });

  it('dispose unregisters the target and closes our probe', () => {
    const probe = kernel.probe;
    bridge.dispose();
    expect(kernel.targets.xlalab).toBeUndefined();
    expect(probe.closed).toBe(true);
    expect(bridge.isDisposed).toBe(true);
  });

  it('disposes itself with the kernel connection', () => {
    kernel.disposed.emit(kernel);
    expect(bridge.isDisposed).toBe(true);
  });
});
