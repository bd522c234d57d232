// The command line of the benchmarks' scripts (bench/families.mjs, bench/vision.mjs, bench/big.mjs,
// bench/big-cache.mjs): `--name value` options, and the two paths each derives from them.
import { join } from 'node:path';

/** The script's arguments. */
export const args = process.argv.slice(2);

/** The value after `--name` on the command line, or `fallback`. */
export function opt(name, fallback) {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : fallback;
}

/**
 * The repository (`--root`, default the parent of `here`, the script's folder) and the data cache
 * (`$KILN_CACHE`, default `<root>/.cache/kiln`).
 */
export function paths(here) {
  const root = opt('root', join(here, '..'));
  return { root, cache: process.env.KILN_CACHE ?? join(root, '.cache', 'kiln') };
}
