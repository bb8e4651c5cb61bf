// GET /tools answers in the format its query asks for; the contract can only
// say "one of these arrays", so listTools ties each format to its own type.
import type { Client } from "openapi-fetch";
import type { components, paths } from "./schema.js";
import { must } from "./problem.js";

type Schemas = components["schemas"];

/** The tool definition type of each `format` of GET /tools. */
export interface ToolFormats {
  generic: Schemas["GenericTool"];
  openai: Schemas["OpenAIChatTool"];
  "openai-strict": Schemas["OpenAIChatTool"];
  "openai-responses": Schemas["OpenAIResponsesTool"];
  anthropic: Schemas["AnthropicTool"];
}
export type ToolFormat = keyof ToolFormats;

// Fails to compile when the contract's formats and ToolFormats part ways.
type ContractFormat = NonNullable<NonNullable<paths["/tools"]["get"]["parameters"]["query"]>["format"]>;
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const formatsMatch: Same<ToolFormat, ContractFormat> = true;
void formatsMatch;

/**
 * dshd's tool definitions in `format` (default `generic`), typed for it:
 * `await listTools(c.api, "openai-responses")` is `OpenAIResponsesTool[]`.
 * Throws a ProblemError when dshd answers with a problem.
 */
export async function listTools<F extends ToolFormat = "generic">(api: Client<paths>, format?: F): Promise<ToolFormats[F][]> {
  const r = await api.GET("/tools", { params: { query: { format: format ?? "generic" } } });
  return must(r) as ToolFormats[F][];
}
