// Continuable setup contributions: installers that run on every continuable child before it is
// published, and whose disposers run exactly once, whichever owner (removal or release) comes first.
import type { Agent } from '../../seam/agent-types.js';
import type { SessionId } from '../../seam/content.js';
import { SubagentError, describeError } from '../../seam/errors.js';

export type ContinuableSetupContribution = (child: Agent) => () => void;

interface Installation {
  contribution: Contribution;
  release: () => void;
}

interface Contribution {
  install: ContinuableSetupContribution;
  removed: boolean;
  installations: Set<Installation>;
}

/** One child's installations; `commit` fails when a contribution was revoked meanwhile. */
export interface SetupBatch {
  commit(): void;
  release(): void;
}

function onceRelease(dispose: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    dispose();
  };
}

/** Runs every release, then throws one error counting the failures. */
function releaseAll(installations: Iterable<Installation>, owner: Set<Installation> | undefined): void {
  const failures: unknown[] = [];
  for (const installation of [...installations]) {
    installation.contribution.installations.delete(installation);
    owner?.delete(installation);
    try {
      installation.release();
    } catch (error) {
      failures.push(error);
    }
  }
  if (failures.length > 0) {
    throw new SubagentError(
      'ACTIVATION_SETUP_RELEASE_FAILED',
      `${failures.length} continuable setup disposer(s) threw: ${failures.map(describeError).join('; ')}`,
      { cause: failures[0] },
    );
  }
}

export class SetupRegistry {
  readonly #contributions: Contribution[] = [];
  readonly #byChild = new Map<SessionId, Set<Installation>>();

  /** Registers `install`; the returned disposer revokes it and releases every installation. */
  register(install: ContinuableSetupContribution): () => void {
    if (typeof install !== 'function') throw new SubagentError('INVALID_REQUEST', 'registerContinuableSetup needs a function (child) => disposer');
    const contribution: Contribution = { install, removed: false, installations: new Set() };
    this.#contributions.push(contribution);
    return () => {
      if (contribution.removed) return;
      contribution.removed = true;
      this.#contributions.splice(this.#contributions.indexOf(contribution), 1);
      releaseAll(contribution.installations, undefined);
    };
  }

  /** Installs every live contribution on `child`, in registration order. */
  apply(child: Agent): SetupBatch {
    const batch: Installation[] = [];
    const owned = this.#byChild.get(child.id) ?? new Set<Installation>();
    this.#byChild.set(child.id, owned);
    try {
      for (const contribution of [...this.#contributions]) {
        const dispose: unknown = contribution.install(child);
        if (typeof dispose !== 'function') {
          // An async contribution: its rejection would be unhandled (ending the process), and the
          // disposer it resolves to is run at once, for this child is not set up.
          if (dispose instanceof Promise) void dispose.then((late: unknown) => typeof late === 'function' && late()).catch(() => undefined);
          throw new SubagentError('INVALID_REQUEST', 'a continuable setup contribution must return its disposer (synchronously, not a promise)');
        }
        const installation: Installation = { contribution, release: onceRelease(dispose as () => void) };
        batch.push(installation);
        contribution.installations.add(installation);
        owned.add(installation);
      }
    } catch (error) {
      try {
        releaseAll(batch, owned);
      } catch {
        // The installer's failure is the one the caller needs to see.
      }
      if (owned.size === 0) this.#byChild.delete(child.id);
      throw error;
    }
    return {
      commit: () => {
        if (batch.some((installation) => installation.contribution.removed)) {
          try {
            releaseAll(batch, owned);
          } finally {
            if (owned.size === 0) this.#byChild.delete(child.id);
          }
          throw new SubagentError('ACTIVATION_SETUP_REVOKED', `a setup contribution was removed while child ${child.id} was being set up`);
        }
      },
      release: () => this.release(child.id),
    };
  }

  /** Releases every installation on one child (its Activation ended). */
  release(childId: SessionId): void {
    const owned = this.#byChild.get(childId);
    if (!owned) return;
    this.#byChild.delete(childId);
    releaseAll(owned, owned);
  }
}
