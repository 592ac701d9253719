// kandle chart page: history from /v1/candles (older pages load as you
// scroll left), live updates from /v1/stream. A token for a server with
// auth goes in the URL fragment: /#token=SECRET.
(function () {
  "use strict";
  const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
  const params = new URLSearchParams(location.search);
  const $ = (id) => document.getElementById(id);
  const status = (text, cls) => { $("status").textContent = text; $("status").className = cls || ""; };
  // pending holds the stream's messages while the newest page loads.
  const state = { symbol: "", timeframe: "", bars: [], cursor: "", loadingOlder: false, ws: null, gen: 0, updates: 0, redrawn: 0, pageLimit: 1000, pending: null };
  // Exposed for tests and the curious: what the chart currently shows.
  window.kandle = { ready: false, bars: 0, updates: 0, last: null, first: null, gaps: 0, error: "" };

  async function api(path) {
    const r = await fetch(path, { headers: token ? { Authorization: "Bearer " + token } : {} });
    const body = await r.json();
    if (!r.ok) throw Object.assign(new Error(body.error || r.statusText), { status: r.status });
    return body;
  }

  const GAP = "#787b86", UP = "rgba(38,166,154,0.5)", DOWN = "rgba(239,83,80,0.5)";
  // toBar draws a candle; the API's exact fields ride along for the legend.
  function toBar(c) {
    const b = { time: c.open_time / 1000, open: +c.open, high: +c.high, low: +c.low, close: +c.close, c: c };
    if (c.gap) { b.color = GAP; b.wickColor = GAP; b.borderColor = GAP; } // flat and grey
    return b;
  }
  function toVolume(b) {
    return { time: b.time, value: +b.c.volume, color: b.c.gap ? GAP : b.close >= b.open ? UP : DOWN };
  }

  const chart = LightweightCharts.createChart($("chart"), {
    autoSize: true,
    layout: { background: { color: "#131722" }, textColor: "#d1d4dc" },
    grid: { vertLines: { color: "#1e222d" }, horzLines: { color: "#1e222d" } },
    timeScale: { timeVisible: true, secondsVisible: false, borderColor: "#2a2e39" },
    rightPriceScale: { borderColor: "#2a2e39" },
  });
  const series = chart.addSeries(LightweightCharts.CandlestickSeries, {
    upColor: "#26a69a", downColor: "#ef5350", borderVisible: false, wickUpColor: "#26a69a", wickDownColor: "#ef5350",
  });

  // The volume pane under the candles: one bar per candle, grey for gaps.
  const volume = chart.addSeries(LightweightCharts.HistogramSeries, { priceFormat: { type: "volume" }, priceLineVisible: false }, 1);
  chart.panes()[1].setHeight(120);

  // legend shows a candle's exact fields: the one under the crosshair, else the newest.
  function legend(b) {
    if (!b) { $("legend").textContent = "no candles yet"; return; }
    const c = b.c;
    $("legend").textContent = `O ${c.open} H ${c.high} L ${c.low} C ${c.close} V ${c.volume} QV ${c.quote_volume}` +
      ` VWAP ${c.vwap == null ? "–" : c.vwap} trades ${c.trades}` +
      // Taker buy volume: only for series whose source maps the aggressor side.
      (c.taker_buy_base_volume == null ? "" : ` taker buy ${c.taker_buy_base_volume} (QV ${c.taker_buy_quote_volume})`) +
      (c.gap ? " gap" : "") + (c.rev ? ` rev ${c.rev}` : "") + (c.final ? "" : " (open)");
  }
  let hovered = null;
  chart.subscribeCrosshairMove((p) => {
    hovered = p && p.time !== undefined ? state.bars.find((b) => b.time === p.time) || null : null;
    legend(hovered || state.bars[state.bars.length - 1]);
  });
  function setData() {
    series.setData(state.bars);
    volume.setData(state.bars.map(toVolume));
  }

  function publish() {
    const bars = state.bars;
    Object.assign(window.kandle, {
      ready: true, symbol: state.symbol, timeframe: state.timeframe, bars: bars.length, updates: state.updates, redrawn: state.redrawn,
      first: bars[0] || null, last: bars[bars.length - 1] || null, gaps: bars.filter((b) => b.color === GAP).length,
      panes: chart.panes().length, volumeBars: volume.data().length,
      lastVolume: volume.data().length ? volume.data()[volume.data().length - 1].value : null,
    });
    if (!hovered) legend(bars[bars.length - 1]);
    window.kandle.legend = $("legend").textContent;
  }

  function precisionOf(bars) {
    const p = bars.length ? bars[bars.length - 1].close : 1;
    const digits = p >= 1000 ? 2 : p >= 1 ? 4 : 8;
    series.applyOptions({ priceFormat: { type: "price", precision: digits, minMove: Math.pow(10, -digits) } });
  }

  function query() {
    return "symbol=" + encodeURIComponent(state.symbol) + "&timeframe=" + encodeURIComponent(state.timeframe);
  }

  // show subscribes to the chosen series and then loads its newest page:
  // what the stream sends meanwhile waits in state.pending and is applied
  // on top of the page, so no candle published between the page's read and
  // the subscription is missed (a gap candle or a final of a quiet window
  // would never come again).
  async function show() {
    const gen = ++state.gen;
    status("loading…");
    state.pending = [];
    try {
      await subscribe();
      if (gen !== state.gen) return;
      // A page of a timeframe built from many stored candles each (1d from
      // 1m) must be smaller: the server says so with a 400.
      let res;
      for (const limit of [1000, 200, 30]) {
        try {
          res = await api("/v1/candles?" + query() + "&limit=" + limit + "&order=desc");
          state.pageLimit = limit;
          break;
        } catch (e) {
          if (e.status !== 400 || limit === 30) throw e;
        }
      }
      if (gen !== state.gen) return;
      state.bars = res.candles.reverse().map(toBar);
      state.cursor = res.next_cursor || "";
      precisionOf(state.bars);
      setData();
      const pending = state.pending;
      state.pending = null;
      for (const m of pending) update(m, true);
      if (state.bars.length < 200) chart.timeScale().fitContent();
      chart.timeScale().applyOptions({ secondsVisible: state.timeframe.endsWith("s") });
      publish();
    } catch (e) {
      if (gen === state.gen) state.pending = null;
      window.kandle.error = String(e.message || e);
      status(window.kandle.error, "error");
    }
  }

  // older loads the page before the first bar when the user scrolls left.
  async function older() {
    if (!state.cursor || state.loadingOlder) return;
    state.loadingOlder = true;
    const gen = state.gen;
    try {
      const res = await api("/v1/candles?cursor=" + encodeURIComponent(state.cursor) + "&limit=" + state.pageLimit);
      if (gen !== state.gen) return;
      const more = res.candles.reverse().map(toBar).filter((b) => !state.bars.length || b.time < state.bars[0].time);
      state.cursor = res.next_cursor || "";
      if (more.length) {
        state.bars = more.concat(state.bars);
        setData();
        publish();
      }
    } catch (e) {
      status(String(e.message || e), "error");
    } finally {
      state.loadingOlder = false;
    }
  }
  chart.timeScale().subscribeVisibleLogicalRangeChange((r) => { if (r && r.from < 20) older(); });

  // update applies a stream message: the newest bar moves, or a newer one
  // follows; an older bar on the chart is redrawn in place (a window's
  // final arrives after the next window opened, and later revisions too:
  // a revision of a closed bar, however old, replaces it). A bar never
  // goes back: after a final only a higher rev is drawn (the stream sends
  // nothing else, but a page read from the API may already hold it).
  // buffered: m came while the page loaded; the page may be newer.
  function update(m, buffered) {
    if (m.symbol !== state.symbol || m.timeframe !== state.timeframe) return;
    if (state.pending) { state.pending.push(m); return; }
    const b = toBar(m);
    const bars = state.bars, last = bars[bars.length - 1];
    if (!last || b.time > last.time) {
      bars.push(b);
      series.update(b);
      volume.update(toVolume(b));
    } else {
      const i = barAt(b.time);
      if (i < 0) {
        // A window that had no candle yet (a late trade made its first, rev
        // 0, after newer ones): inserted in time order, unless it is older
        // than the first page while older pages exist (scrolling loads it).
        if (state.cursor && b.time < bars[0].time) return;
        bars.splice(bars.findIndex((x) => x.time > b.time), 0, b);
        setData();
        state.redrawn++;
        state.updates++;
        publish();
        return;
      }
      const had = bars[i].c;
      if (had.final && !(m.final && (m.rev || 0) > (had.rev || 0))) return;
      // An open window's state the page read after this message holds more.
      if (buffered && !m.final && !had.final && m.trades < had.trades) return;
      bars[i] = b;
      series.update(b, true); // historical update: replaces the bar at its time
      volume.update(toVolume(b), true);
      if (i < bars.length - 1) state.redrawn++;
    }
    state.updates++;
    publish();
  }

  // barAt returns the index of the bar at time t, or -1.
  function barAt(t) {
    let lo = 0, hi = state.bars.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1, x = state.bars[mid].time;
      if (x === t) return mid;
      if (x < t) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
  }
  // For tests: what the chart's two series hold at a time (seconds): the
  // candle bar as drawn, the API candle it came from and its volume bar.
  window.kandle.drawn = (t) => {
    const i = barAt(t);
    return {
      bar: series.data().find((b) => b.time === t) || null,
      candle: i < 0 ? null : state.bars[i].c,
      volume: volume.data().find((v) => v.time === t) || null,
    };
  };

  // subscribe opens the stream (once) and subscribes to the shown series;
  // it resolves once the server confirmed the subscription (from then on
  // every candle of the series reaches the page), or when the stream cannot
  // tell (closed, or no reply within 5 s: the page then loads anyway).
  // After a disconnect the page reconnects and reloads the newest page: the
  // API gives the history, the stream what follows.
  let nextID = 1, subscribed = null, confirm = null; // confirm: the SUBSCRIBE awaiting its reply
  function subscribe() {
    return new Promise((resolve) => {
      if (confirm) confirm.done(); // an older wait ends: its series is no longer shown
      const timer = setTimeout(() => done(), 5000);
      const done = () => {
        clearTimeout(timer);
        if (confirm && confirm.done === done) confirm = null;
        resolve();
      };
      confirm = { id: 0, done };
      send();
    });
  }
  function send() {
    const ws = state.ws;
    if (ws && ws.readyState === WebSocket.OPEN) {
      if (subscribed) ws.send(JSON.stringify({ id: nextID++, method: "UNSUBSCRIBE", params: [subscribed] }));
      subscribed = { symbol: state.symbol, timeframe: state.timeframe };
      const id = nextID++;
      if (confirm) confirm.id = id;
      ws.send(JSON.stringify({ id, method: "SUBSCRIBE", params: [subscribed] }));
      status("live", "live");
      return;
    }
    if (ws && ws.readyState === WebSocket.CONNECTING) return;
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/stream" +
      (token ? "?token=" + encodeURIComponent(token) : "");
    const s = new WebSocket(url);
    state.ws = s;
    subscribed = null;
    s.onopen = () => { status("live", "live"); send(); };
    s.onmessage = (ev) => {
      const m = JSON.parse(ev.data);
      if (confirm && confirm.id && m.id === confirm.id) confirm.done();
      if (m.error) { status(m.error.msg, "error"); return; }
      if (m.symbol) update(m);
    };
    s.onclose = (ev) => {
      if (state.ws !== s) return;
      state.ws = null;
      if (confirm) confirm.done();
      status("reconnecting… (" + (ev.reason || ev.code) + ")", "error");
      setTimeout(show, 1000);
    };
  }

  // fill lists items in sel, then each group's items under its label.
  function fill(sel, items, want, groups) {
    sel.innerHTML = "";
    const add = (parent, it) => {
      const o = document.createElement("option");
      o.value = o.textContent = it;
      parent.appendChild(o);
    };
    for (const it of items) add(sel, it);
    let all = items;
    for (const [label, more] of groups || []) {
      if (!more || !more.length) continue;
      const g = document.createElement("optgroup");
      g.label = label;
      for (const it of more) add(g, it);
      sel.appendChild(g);
      all = all.concat(more);
    }
    if (want && all.includes(want)) sel.value = want;
  }

  async function start() {
    try {
      const [tfs, syms] = await Promise.all([api("/v1/timeframes"), api("/v1/symbols")]);
      // Stored timeframes, then those the server builds from them (the
      // list its UDF config offers too).
      fill($("timeframe"), tfs.timeframes, params.get("timeframe") || "1m", [["built from stored candles", tfs.derived]]);
      fill($("symbol"), syms.symbols, params.get("symbol"));
      if (params.get("symbol") && !syms.symbols.includes(params.get("symbol"))) {
        fill($("symbol"), [params.get("symbol")].concat(syms.symbols), params.get("symbol"));
      }
      if (!$("symbol").value) { status("no symbols yet: produce some trades, then reload", "error"); window.kandle.ready = true; return; }
      const pick = () => {
        state.symbol = $("symbol").value;
        state.timeframe = $("timeframe").value;
        history.replaceState(null, "", "?" + query() + location.hash);
        show();
      };
      $("symbol").onchange = pick;
      $("timeframe").onchange = pick;
      pick();
    } catch (e) {
      window.kandle.error = String(e.message || e);
      status(window.kandle.error, "error");
    }
  }
  start();
})();
