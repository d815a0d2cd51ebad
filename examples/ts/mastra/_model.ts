// Which model the Mastra examples talk to. Online (HUTCH_SCRIPTED_MODEL_URL unset), the seed's own
// model string, through Mastra's model router and the provider's key (ANTHROPIC_API_KEY). Offline,
// hutch's scripted model on loopback (hutch/integrations/scripted_model.py, which speaks OpenAI's
// Chat Completions API), through Mastra's OpenAI-compatible provider: the tests start it with the
// tool calls the example expects, so the agent's tools run in a real box and no key is needed.
export function model(id: string) {
  const url = process.env.HUTCH_SCRIPTED_MODEL_URL
  if (!url) return id
  return { providerId: "hutch-scripted", modelId: "scripted", url, apiKey: "offline", api: "chat" as const }
}
