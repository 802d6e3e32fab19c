// The environment of ACP child processes: the host's own environment minus anything that looks
// like a credential, then the provider's configured `env` added unchanged (an explicit key wins).

/** Variable names treated as credentials and never inherited. */
export const CREDENTIAL_NAME = /(KEY|TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|AUTH|COOKIE)/i;

/** `parent` without credential-shaped names, then `configured` on top. */
export function childEnvironment(parent: NodeJS.ProcessEnv, configured: Readonly<Record<string, string>>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(parent)) {
    if (value !== undefined && !CREDENTIAL_NAME.test(name)) env[name] = value;
  }
  return Object.assign(env, configured);
}
