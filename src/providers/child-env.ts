// The environment of every process started for a child: an allow-list of what an agent process
// needs to start and behave (by default), never the host's credentials; the configured env on top.

/** Which host variables a child process inherits: the allow-list, everything but credentials, or exactly these names/globs. */
export type InheritEnv = 'minimal' | 'all-but-credentials' | readonly string[];

/**
 * What `'minimal'` passes (globs: `*` is any run of characters). Each entry is needed to start or
 * behave like a normal user process; none names a secret.
 */
export const MINIMAL_ENV: readonly string[] = Object.freeze([
  // Finding executables (`#!/usr/bin/env node`, npx, git) and the user's own config and caches.
  'PATH',
  'HOME',
  // Who the user is (git, ssh and os.userInfo fallbacks) and which shell runs commands.
  'USER',
  'LOGNAME',
  'SHELL',
  // Text encoding, messages, dates.
  'LANG',
  'LANGUAGE',
  'LC_*',
  'TZ',
  // Terminal capabilities of the commands an agent runs.
  'TERM',
  // Where temporary files go.
  'TMPDIR',
  'TMP',
  'TEMP',
  // Base directories of config, data, cache, state and runtime files.
  'XDG_*_HOME',
  'XDG_*_DIRS',
  'XDG_RUNTIME_DIR',
  // Network access through the host's proxy (dropped when the URL carries user:password@).
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'ALL_PROXY',
  'NO_PROXY',
  'http_proxy',
  'https_proxy',
  'all_proxy',
  'no_proxy',
  // Extra CA certificates (public files) without which TLS fails behind an intercepting proxy.
  'SSL_CERT_FILE',
  'SSL_CERT_DIR',
  'NODE_EXTRA_CA_CERTS',
  // Windows: processes fail without SystemRoot/windir; the rest locate the profile and programs.
  'SystemRoot',
  'SystemDrive',
  'windir',
  'ComSpec',
  'PATHEXT',
  'USERNAME',
  'USERPROFILE',
  'HOMEDRIVE',
  'HOMEPATH',
  'APPDATA',
  'LOCALAPPDATA',
  'ProgramData',
  'ProgramFiles',
  'ProgramFiles(x86)',
  'CommonProgramFiles',
  'NUMBER_OF_PROCESSORS',
  'PROCESSOR_ARCHITECTURE',
]);

/**
 * Names `'all-but-credentials'` drops. `PWD$` also drops `PWD`/`OLDPWD`, which would name the
 * host's directory rather than the child's; `PAT` only as a whole word, so `PATH` stays.
 */
export const CREDENTIAL_NAME = /KEY|TOKEN|SECRET|PASS|PWD$|(^|_)PAT(_|$)|DSN|PRIVATE|CREDENTIAL|AUTH|COOKIE/i;

/** A URL with userinfo (`scheme://user:pass@host`, `scheme://token@host`) anywhere in a value. */
export const URL_USERINFO = /[a-z][a-z0-9+.-]*:\/\/[^/?#\s@]*@/i;

// Windows variable names are case-insensitive; elsewhere `Path` and `PATH` are different variables.
const FLAGS = process.platform === 'win32' ? 'i' : '';

/** One matcher for a list of names and globs (`*` = any run of characters). */
export function envNameMatcher(patterns: readonly string[]): (name: string) => boolean {
  if (patterns.length === 0) return () => false;
  const escaped = patterns.map((pattern) => pattern.split('*').map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*'));
  const regex = new RegExp(`^(?:${escaped.join('|')})$`, FLAGS);
  return (name) => regex.test(name);
}

const isMinimal = envNameMatcher(MINIMAL_ENV);

/** The host variables `inherit` passes from `parent`, then `configured` on top, unchanged (explicit wins). */
export function childEnvironment(parent: NodeJS.ProcessEnv, inherit: InheritEnv, configured: Readonly<Record<string, string>>): Record<string, string> {
  let keep: (name: string, value: string) => boolean;
  if (inherit === 'minimal') keep = (name, value) => isMinimal(name) && !URL_USERINFO.test(value);
  else if (inherit === 'all-but-credentials') keep = (name, value) => !CREDENTIAL_NAME.test(name) && !URL_USERINFO.test(value);
  else {
    // An explicit list is the caller's decision: exactly those names, values untouched.
    const listed = envNameMatcher(inherit);
    keep = (name) => listed(name);
  }
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(parent)) {
    if (value !== undefined && keep(name, value)) env[name] = value;
  }
  return Object.assign(env, configured);
}
