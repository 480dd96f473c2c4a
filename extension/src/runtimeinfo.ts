/** Where the kernel runs, as the panel's "Kernel" table says it. */
import { countOf } from './format';
import { RuntimeInfo } from './protocol';

/** [label, text] rows; pure, so it is tested without a DOM. */
export function runtimeRows(runtime: RuntimeInfo | null, xlalab: string): [string, string][] {
  if (!runtime) {
    return [['Runs on', 'unknown (the kernel did not say)']];
  }
  const versions = `xlalab ${xlalab}, JAX ${runtime.jax || '?'}, torch ${runtime.torch || '?'}`;
  const cache = runtime.compile_cache_dir ? `on, in ${runtime.compile_cache_dir}` : 'off';
  if (!runtime.started) {
    return [
      ['Runs on', 'not started yet: the first xla device or tensor starts it'],
      ['Versions', versions],
      ['Compile cache', cache]
    ];
  }
  const kind =
    runtime.device_kind && runtime.device_kind !== runtime.platform ? ` (${runtime.device_kind})` : '';
  return [
    [
      'Runs on',
      `${runtime.hw || runtime.platform.toUpperCase()}, ${countOf(runtime.device_count, 'device')}${kind}`
    ],
    ['Versions', versions],
    ['Compile cache', cache]
  ];
}
