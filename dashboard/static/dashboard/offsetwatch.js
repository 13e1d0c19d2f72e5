// Offset Watch's few behaviours, wired from data attributes: pages carry no inline script or
// event handler, so the Content-Security-Policy allows scripts from this site's files only.
//   data-poll-url="URL"        re-render this element from its partial (quick while the tab is
//                              visible, slow when hidden); data-poll-redraws="ID" redraws that
//                              chart after each re-render
//   data-chart-url="URL"       draw the plotly figure (JSON) from URL into this element
//   <select data-autosubmit>   submit its form when the choice changes
//   <a data-partial-link>      inside a polled element: becomes the page's address (shareable,
//                              and kept by the polling) and re-renders that element at once,
//                              without reloading the page (e.g. a partition table's "show more")
"use strict";

async function drawChart(el) {
  if (!el || !window.Plotly) return;
  try {
    const resp = await fetch(el.dataset.chartUrl, {credentials: "same-origin"});
    if (!resp.ok) return;
    const fig = await resp.json();
    window.Plotly.react(el, fig.data, fig.layout, {responsive: true, displaylogo: false});
  } catch (e) { /* network blip: keep the last drawing */ }
}

function pollPartial(el) {
  const url = el.dataset.pollUrl;
  const redraws = el.dataset.pollRedraws;
  let latest = 0;  // only the newest request's answer is shown (a click may overtake a poll)
  let timer = null;
  async function refresh() {
    const mine = ++latest;
    try {
      const resp = await fetch(url + window.location.search, {credentials: "same-origin"});
      if (resp.ok && mine === latest) {
        el.innerHTML = await resp.text();
        if (redraws) drawChart(document.getElementById(redraws));
      }
    } catch (e) { /* network blip: keep the last render and try again */ }
  }
  async function tick() {
    await refresh();
    clearTimeout(timer);  // a click's tick and the poll's may both end here: one timer goes on
    timer = setTimeout(tick, document.hidden ? 30000 : 5000);
  }
  el.addEventListener("click", (event) => {
    const link = event.target.closest("a[data-partial-link]");
    if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    history.pushState(null, "", link.href);
    clearTimeout(timer);
    tick();
  });
  window.addEventListener("popstate", () => { clearTimeout(timer); tick(); });
  timer = setTimeout(tick, 5000);
}

document.querySelectorAll("[data-chart-url]").forEach(drawChart);
document.querySelectorAll("[data-poll-url]").forEach(pollPartial);
document.querySelectorAll("select[data-autosubmit]").forEach((select) => {
  select.addEventListener("change", () => select.form.submit());
});
