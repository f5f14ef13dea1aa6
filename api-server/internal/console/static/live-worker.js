// Mango console: one event stream per session, shared by every tab that
// shows the session. Browsers allow six HTTP/1.1 connections per host, so
// an EventSource per tab stalls the seventh tab of a console served over
// plain HTTP; through this worker ten tabs of a session hold one
// connection. The worker keeps the committed frames it relayed (up to
// MAX) so that a tab joining later gets what its page may lack; a tab
// whose page is older than that is told to open a stream of its own.

const MAX = 5000;
const streams = new Map(); // session id -> stream

function open(session, after) {
  const url = `/console/sessions/${encodeURIComponent(session)}/live${after ? `?after=${encodeURIComponent(after)}` : ''}`;
  const s = { source: new EventSource(url), start: after, frames: [], ids: new Set(), ports: new Set(), live: false };
  const fan = (msg) => s.ports.forEach((p) => p.postMessage(msg));
  s.source.addEventListener('open', () => { s.live = true; fan({ kind: 'state', live: true }); });
  s.source.addEventListener('error', () => { s.live = false; fan({ kind: 'state', live: false }); });
  for (const kind of ['event', 'summary', 'preview_start', 'preview']) {
    s.source.addEventListener(kind, (e) => {
      const msg = { kind, data: e.data };
      if (kind === 'event') {
        msg.id = e.lastEventId;
        s.frames.push(msg);
        s.ids.add(msg.id);
        if (s.frames.length > MAX) {
          const old = s.frames.shift();
          s.ids.delete(old.id);
          s.start = old.id; // frames after it are still here
        }
      }
      fan(msg);
    });
  }
  streams.set(session, s);
  return s;
}

function leave(port) {
  const s = streams.get(port.session);
  if (!s) return;
  s.ports.delete(port);
  if (s.ports.size === 0) {
    s.source.close();
    streams.delete(port.session);
  }
}

function join(port, session, after) {
  let s = streams.get(session);
  if (s && after !== s.start && !s.ids.has(after)) {
    port.postMessage({ kind: 'own' }); // this worker cannot fill the page's gap
    return;
  }
  if (!s) s = open(session, after);
  port.session = session;
  s.ports.add(port);
  if (s.live) port.postMessage({ kind: 'state', live: true });
  s.frames.forEach((f) => port.postMessage(f)); // the tab skips what its page shows
}

self.addEventListener('connect', (e) => {
  const port = e.ports[0];
  port.addEventListener('message', (m) => {
    if (m.data.type === 'join') join(port, m.data.session, m.data.after || '');
    if (m.data.type === 'leave') leave(port);
  });
  port.start();
});
