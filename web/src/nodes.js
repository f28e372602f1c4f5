// The hub's node list (GET /api/v1/nodes) as the Nodes screen shows it: the nodes that need a
// look first (drain recommended, then degraded), each with its reason, what it runs and how long
// since the hub last heard from it. Pure functions.

// Worst first. Draining is only ever advised (the hub drains nothing).
export const HEALTH = ["drain_recommended", "degraded", "healthy"];
export const HEALTH_TEXT = { drain_recommended: "drain recommended", degraded: "degraded", healthy: "healthy" };

const rankOf = (h) => (HEALTH.includes(h) ? HEALTH.indexOf(h) : HEALTH.length);

// "4 s ago", "3 min ago", "2.5 h ago"; "never" before its first push.
export function fmtAgo(s) {
  if (s === null || s === undefined) return "never";
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}

// The rows, worst health first and by name within one health.
export function nodeRows(doc, nowMs) {
  const nodes = (doc && doc.nodes) || [];
  return nodes
    .map((n) => ({
      node: n.node,
      health: n.health,
      healthText: HEALTH_TEXT[n.health] || n.health,
      reason: n.reason || "",
      gpus: n.gpus ?? null,
      versions: [["driver", n.driver_version], ["CUDA", n.cuda_version], ["NCCL", n.nccl_version]]
        .filter(([, v]) => v).map(([k, v]) => `${k} ${v}`).join(" · "),
      clockOffsetMs: n.clock_offset_ms ?? null,
      silentS: n.last_push_ms > 0 ? Math.max(0, (nowMs - n.last_push_ms) / 1000) : null,
    }))
    .sort((a, b) => rankOf(a.health) - rankOf(b.health) || a.node.localeCompare(b.node));
}

// How many nodes are in each health state: {drain_recommended, degraded, healthy}.
export function healthCounts(rows) {
  const out = Object.fromEntries(HEALTH.map((h) => [h, 0]));
  for (const r of rows) if (r.health in out) out[r.health]++;
  return out;
}
