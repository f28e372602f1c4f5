// #/nodes (a hub's dashboard): every node the hub hears from, with its health state and the
// reason — the open card and link findings on it, or its silence — worst first. A node's name
// opens the GPUs screen on that node; the fleet heat map is the GPUs screen without a node.
import { getJson, usePoll } from "./api.js";
import { html } from "./charts.js";
import { formatHash } from "./view_state.js";
import { HEALTH, HEALTH_TEXT, fmtAgo, healthCounts, nodeRows } from "./nodes.js";

const HEALTH_CLASS = { drain_recommended: "sev-critical", degraded: "sev-warning", healthy: "" };

export function NodesScreen({ view, ctx }) {
  const doc = usePoll(() => getJson("/api/v1/nodes"), [], true);
  const rows = nodeRows(doc.data, Date.now()).filter((r) => !ctx.filters.node || r.node === ctx.filters.node);
  const counts = healthCounts(rows);
  const open = (node) => formatHash({ screen: "gpus", arg: "", params: { ...view.params, node } });
  return html`<section data-screen="nodes">
    ${doc.error && html`<div class="error">${doc.error}</div>`}
    ${doc.data && html`<div class="facts" data-list="node-health">${rows.length} nodes: ${HEALTH.map((h) => `${counts[h]} ${HEALTH_TEXT[h]}`).join(" · ")}</div>`}
    ${doc.data && rows.length === 0 && html`<div class="empty">No node has pushed to this hub yet.</div>`}
    ${rows.length > 0 && html`<table class="findings" data-list="nodes">
      <tr><th>node</th><th>health</th><th>reason</th><th>GPUs</th><th>versions</th><th>clock offset</th><th>last heard</th></tr>
      ${rows.map((r) => html`<tr data-node=${r.node} data-health=${r.health} class=${HEALTH_CLASS[r.health] || ""}>
        <td><a href=${open(r.node)}>${r.node}</a></td><td>${r.healthText}</td><td>${r.reason}</td>
        <td>${r.gpus ?? ""}</td><td>${r.versions}</td>
        <td>${r.clockOffsetMs === null ? "–" : r.clockOffsetMs.toFixed(1) + " ms"}</td><td>${fmtAgo(r.silentS)}</td></tr>`)}
    </table>
    <div class="muted source">Health: drain recommended on a critical card or link finding, degraded on a warning or when the
      node has been silent; a job's own troubles say nothing of its nodes. Draining is only advised.</div>`}
  </section>`;
}
