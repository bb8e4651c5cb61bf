// Problems as typed errors: dshd answers every error with RFC 9457 problem
// details carrying a machine-readable code. Its own module so that index.ts
// and tools.ts both import it, and neither imports the other back.
import type { components } from "./schema.js";

export type Problem = components["schemas"]["Problem"];

/** An error answer of dshd: RFC 9457 problem details with a `code`. */
export class ProblemError extends Error {
  readonly status: number;
  readonly code: string;
  readonly problem: Problem;
  constructor(problem: Problem) {
    super(`${problem.status} ${problem.code}: ${problem.detail ?? problem.title}`);
    this.name = "ProblemError";
    this.status = problem.status;
    this.code = problem.code;
    this.problem = problem;
  }
}

/** Returns data, or throws the problem openapi-fetch returned as error. */
export function must<T>(r: { data?: T; error?: unknown; response: Response }): T {
  if (r.error !== undefined || !r.response.ok) {
    const e = r.error as Partial<Problem> | undefined;
    if (e && typeof e === "object" && typeof e.code === "string") throw new ProblemError(e as Problem);
    throw new ProblemError({ type: "about:blank", title: r.response.statusText, status: r.response.status, code: "unexpected_response" });
  }
  return r.data as T;
}
