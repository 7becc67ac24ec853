// Settings from the environment (docs/protocol.md#client-configuration) and connect(): the
// Python client's rules (client/config.py) for the variables a TypeScript driver uses.
//
// Resolution: explicit option > environment > the files `lane setup` writes in the config dir
// (`$LANE_CONFIG_DIR`, else `$XDG_CONFIG_HOME/lane`, else `~/.config/lane`): `client.env`
// (KEY=VALUE; a LANE_TOKEN line in it is ignored when the file is readable by others) and
// `token` (mode 0600, else refused). An empty variable counts as unset. The OS keyring is not
// read (no dependency for it): on a computer whose token `lane setup` stored there, export
// LANE_TOKEN for the TypeScript driver.
//
// There is no local queue in TypeScript: without LANE_COORDINATOR_URL, connect() refuses —
// a PreProviderError under LANE_REQUIRED=1 (as in Python), a ConfigError otherwise
// (docs/decisions.md, "The TypeScript client").
import { randomUUID } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

import { DEFAULT_TIMEOUT_SECONDS, LaneClient } from "./client.js";
import { ConfigError, PreProviderError } from "./errors.js";
import { DEFAULT_RETRY, type RetryPolicy } from "./transport.js";

export const ENV_URL = "LANE_COORDINATOR_URL";
export const ENV_TOKEN = "LANE_TOKEN";
export const ENV_MACHINE = "LANE_MACHINE_ID";
export const ENV_ACCOUNT = "LANE_ACCOUNT";
export const ENV_REQUIRED = "LANE_REQUIRED";
export const ENV_CLAIM = "LANE_CLAIM";
export const ENV_COOLDOWN = "LANE_HUMAN_CHECK_COOLDOWN_SECONDS";
export const ENV_TIMEOUT = "LANE_TIMEOUT_SECONDS";
export const ENV_CONFIG_DIR = "LANE_CONFIG_DIR";
export const DEFAULT_COOLDOWN_SECONDS = 900;
export const MIN_COOLDOWN_SECONDS = 30;
export const MAX_COOLDOWN_SECONDS = 7200;
const TRUE = new Set(["1", "true", "yes", "on"]);
const FALSE = new Set(["0", "false", "no", "off", ""]);
const ENV_LINE = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$/;

export type Environment = Record<string, string | undefined>;

export interface Settings {
  readonly url: string | undefined;
  readonly token: string | undefined;
  /** Where the token came from (never the token itself). */
  readonly tokenSource: string;
  readonly machineId: string | undefined;
  readonly account: string | undefined;
  readonly required: boolean;
  readonly claimId: string | undefined;
  readonly humanCheckCooldownSeconds: number;
  readonly timeoutSeconds: number;
  readonly configDir: string;
  readonly warnings: readonly string[];
  /** Why a token file was not used. */
  readonly tokenProblem: string | undefined;
}

export interface SettingsOptions {
  url?: string;
  token?: string;
  machineId?: string;
  account?: string;
  required?: boolean;
  claimId?: string;
  timeoutSeconds?: number;
  /** The environment to read (default: process.env). */
  env?: Environment;
  /** Mint a uuid4 claim when LANE_CLAIM is unset and export it into `env` (default true), so
   * child processes (a `lane` CLI call) act as the same driver. */
  mintClaim?: boolean;
}

export function configDir(env: Environment = process.env): string {
  const own = env[ENV_CONFIG_DIR];
  if (own) return own;
  const xdg = env["XDG_CONFIG_HOME"];
  if (xdg) return join(xdg, "lane");
  return join(env["HOME"] || homedir(), ".config", "lane");
}

/** Why `path` is readable or writable by others (undefined when it is 0600 or stricter, or
 * does not exist). */
export function modeProblem(path: string): string | undefined {
  let mode: number;
  try {
    mode = statSync(path).mode & 0o777;
  } catch {
    return undefined;
  }
  if ((mode & 0o077) === 0) return undefined;
  return `${path} has mode ${mode.toString(8).padStart(4, "0")} (readable by others); run: chmod 600 ${path}`;
}

/** `KEY=VALUE` lines (optional `export`, optional quotes, `#` comments). */
export function readEnvFile(path: string): Map<string, string> {
  const out = new Map<string, string>();
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return out;
  }
  for (const line of text.split(/\r?\n/)) {
    if (!line.trim() || line.trimStart().startsWith("#")) continue;
    const m = ENV_LINE.exec(line);
    const key = m?.[1];
    let value = m?.[2];
    if (key === undefined || value === undefined) continue;
    const q = value[0];
    if (value.length >= 2 && (q === "'" || q === '"') && value.endsWith(q)) value = value.slice(1, -1);
    out.set(key, value);
  }
  return out;
}

/** undefined when unset; an unknown spelling counts as true (fail closed). */
export function parseBool(value: string | undefined): boolean | undefined {
  if (value === undefined) return undefined;
  const low = value.trim().toLowerCase();
  if (FALSE.has(low)) return false;
  return TRUE.has(low) ? true : undefined;
}

function clamp(value: number, low: number, high: number): number {
  return Math.min(high, Math.max(low, value));
}

export function loadSettings(options: SettingsOptions = {}): Settings {
  const env = options.env ?? process.env;
  const warnings: string[] = [];
  const dir = configDir(env);
  const envPath = join(dir, "client.env");
  const files = readEnvFile(envPath);
  const loose = files.size > 0 ? modeProblem(envPath) : undefined;
  if (loose !== undefined) {
    warnings.push(`lane: warning: ${loose}`);
    if (files.delete(ENV_TOKEN)) {
      warnings.push(`lane: warning: ignoring ${ENV_TOKEN} in ${envPath} (not private)`);
    }
  }
  const pick = (explicit: string | undefined, key: string): string | undefined =>
    explicit || env[key] || files.get(key) || undefined;

  const url = pick(options.url, ENV_URL)?.trim().replace(/\/+$/, "") || undefined;

  let required = options.required;
  if (required === undefined) {
    const raw = pick(undefined, ENV_REQUIRED);
    const parsed = parseBool(raw);
    if (raw !== undefined && parsed === undefined) {
      warnings.push(`lane: warning: ${ENV_REQUIRED}=${JSON.stringify(raw)} is not 0/1; treated as 1 (fail closed)`);
    }
    required = raw === undefined ? false : (parsed ?? true);
  }

  let claimId = options.claimId || env[ENV_CLAIM] || undefined;
  if (claimId === undefined && (options.mintClaim ?? true)) {
    claimId = randomUUID();
    env[ENV_CLAIM] = claimId;
  }

  let cooldown = DEFAULT_COOLDOWN_SECONDS;
  const rawCooldown = pick(undefined, ENV_COOLDOWN);
  if (rawCooldown !== undefined) {
    const value = Number(rawCooldown.trim());
    if (rawCooldown.trim() === "" || Number.isNaN(value)) {
      warnings.push(`lane: warning: ${ENV_COOLDOWN}=${JSON.stringify(rawCooldown)} is not a number; using 900`);
    } else {
      cooldown = clamp(value, MIN_COOLDOWN_SECONDS, MAX_COOLDOWN_SECONDS);
    }
  }

  let timeoutSeconds = options.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS;
  const rawTimeout = options.timeoutSeconds === undefined ? pick(undefined, ENV_TIMEOUT) : undefined;
  if (rawTimeout !== undefined) {
    const value = Number(rawTimeout.trim());
    if (rawTimeout.trim() !== "" && value > 0 && Number.isFinite(value)) timeoutSeconds = value;
    else warnings.push(`lane: warning: ${ENV_TIMEOUT}=${JSON.stringify(rawTimeout)} is invalid; using 10`);
  }

  const token = resolveToken(options.token, env, files, dir);
  return {
    url,
    token: token.token,
    tokenSource: token.source,
    machineId: pick(options.machineId, ENV_MACHINE),
    account: pick(options.account, ENV_ACCOUNT),
    required,
    claimId,
    humanCheckCooldownSeconds: cooldown,
    timeoutSeconds,
    configDir: dir,
    warnings,
    tokenProblem: token.problem,
  };
}

function resolveToken(
  explicit: string | undefined,
  env: Environment,
  files: ReadonlyMap<string, string>,
  dir: string,
): { token: string | undefined; source: string; problem: string | undefined } {
  if (explicit) return { token: explicit, source: "argument", problem: undefined };
  const fromEnv = env[ENV_TOKEN];
  if (fromEnv) return { token: fromEnv, source: `$${ENV_TOKEN}`, problem: undefined };
  const path = join(dir, "token");
  let problem: string | undefined;
  let text: string | undefined;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    text = undefined; // no token file
  }
  if (text !== undefined) {
    const loose = modeProblem(path);
    const first = text.trim().split(/\r?\n/)[0]?.trim();
    if (loose !== undefined) problem = `token file refused: ${loose}`;
    else if (first) return { token: first, source: path, problem: undefined };
  }
  const fromFile = files.get(ENV_TOKEN);
  if (fromFile) return { token: fromFile, source: join(dir, "client.env"), problem };
  return { token: undefined, source: "", problem };
}

const announced = new Set<string>();

/** The LaneClient these settings call for. Refuses — never a local fallback — when the
 * coordinator's URL, the token or the machine id is missing: a PreProviderError when
 * required, else a ConfigError. Warnings go to stderr once per process. */
export function connect(
  settings: Settings = loadSettings(),
  options: { retry?: RetryPolicy } = {},
): LaneClient {
  for (const w of settings.warnings) {
    if (!announced.has(w)) {
      announced.add(w);
      console.error(w);
    }
  }
  if (!settings.url) {
    if (settings.required) {
      throw new PreProviderError(
        `${ENV_REQUIRED}=1 but ${ENV_URL} is unset: the shared coordinator is required and ` +
          "the local queue is never used as a fallback",
      );
    }
    throw new ConfigError(
      0,
      `${ENV_URL} is unset: the TypeScript client has no local queue (the single-computer ` +
        "queue is the Python client's); set it to the shared coordinator's URL, or run one on " +
        "this computer (lane-coordinator serve)",
    );
  }
  const missing: string[] = [];
  if (!settings.token) {
    const hint = settings.tokenProblem !== undefined ? ` — ${settings.tokenProblem}` : "";
    missing.push(
      `${ENV_TOKEN} (not in the environment or ${join(settings.configDir, "token")}; ` +
        `this client does not read the OS keyring)${hint}`,
    );
  }
  if (!settings.machineId) missing.push(ENV_MACHINE);
  if (missing.length > 0) {
    const what = `missing client configuration: ${missing.join("; ")}`;
    throw settings.required ? new PreProviderError(what) : new ConfigError(0, what);
  }
  return new LaneClient({
    url: settings.url,
    token: settings.token ?? "",
    machineId: settings.machineId ?? "",
    claimId: settings.claimId ?? null,
    timeoutSeconds: settings.timeoutSeconds,
    required: settings.required,
    retry: options.retry ?? DEFAULT_RETRY,
  });
}
