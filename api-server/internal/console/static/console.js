// Mango console: progressive enhancement of server-rendered pages.
// Forms marked data-async are posted with fetch (the CSRF token in a
// header) so the page and its live stream stay open; the session page
// follows its session over an EventSource. Nothing here builds markup
// from event content: entries arrive rendered and escaped by the server,
// preview text is set with textContent.

const state = { ready: false, live: false, events: 0, seen: {} };
window.mangoConsole = state;

const csrf = document.querySelector('meta[name="csrf-token"]')?.content ?? '';

function showError(form, message) {
  let box = form.querySelector('.form-error');
  if (!box) {
    box = document.createElement('p');
    box.className = 'form-error alert';
    box.setAttribute('role', 'alert');
    form.append(box);
  }
  box.textContent = message;
}

async function postAsync(form, submitter) {
  const body = new FormData(form, submitter);
  const buttons = form.querySelectorAll('button');
  buttons.forEach((b) => { b.disabled = true; });
  try {
    const resp = await fetch(form.action, {
      method: 'POST', body, credentials: 'same-origin', headers: { 'X-CSRF-Token': csrf },
    });
    if (resp.status === 401) {
      window.location.assign('/console/sign-in');
      return;
    }
    if (!resp.ok) {
      const text = await resp.text();
      const doc = new DOMParser().parseFromString(text, 'text/html');
      showError(form, doc.querySelector('[role="alert"]')?.textContent || text.slice(0, 500) || resp.statusText);
      return;
    }
    form.querySelector('.form-error')?.remove();
    if (form.hasAttribute('data-reset')) form.reset();
    if (form.hasAttribute('data-for')) form.hidden = true;
  } catch (err) {
    showError(form, `The request failed: ${err.message}`);
  } finally {
    buttons.forEach((b) => { b.disabled = false; });
  }
}

document.addEventListener('submit', (e) => {
  const form = e.target;
  const question = form.getAttribute('data-confirm');
  if (question && !window.confirm(question)) {
    e.preventDefault();
    return;
  }
  if (form.hasAttribute('data-async')) {
    e.preventDefault();
    postAsync(form, e.submitter);
  }
});

function nearBottom() {
  return window.innerHeight + window.scrollY >= document.body.scrollHeight - 200;
}

// The timeline follows new entries while the reader is at its end. Where
// the reader is comes from scroll events, and the scroll after a burst of
// entries is one, later: an entry's arrival forces no layout.
let stick = true;
let scrollPending = false;
window.addEventListener('scroll', () => { stick = nearBottom(); }, { passive: true });
function followEnd() {
  if (!stick || scrollPending) return;
  scrollPending = true;
  setTimeout(() => {
    scrollPending = false;
    window.scrollTo(0, document.body.scrollHeight);
  }, 50);
}

// connect delivers the session's live frames to handlers: through the
// shared worker (one stream for every tab of the session) when the browser
// has one, else over an EventSource of this page's own.
function connect(id, after, handlers) {
  const direct = () => {
    const url = `/console/sessions/${encodeURIComponent(id)}/live${after ? `?after=${encodeURIComponent(after)}` : ''}`;
    const source = new EventSource(url);
    source.addEventListener('open', () => handlers.state(true));
    source.addEventListener('error', () => handlers.state(false));
    for (const kind of ['event', 'summary', 'preview_start', 'preview']) {
      source.addEventListener(kind, (e) => handlers[kind](e.data));
    }
  };
  const script = document.querySelector('meta[name="live-worker"]')?.content;
  if (!script || !window.SharedWorker) {
    direct();
    return;
  }
  const worker = new SharedWorker(script, { name: 'mango-live' });
  worker.port.addEventListener('message', (m) => {
    const msg = m.data;
    if (msg.kind === 'own') {
      worker.port.close();
      direct();
    } else if (msg.kind === 'state') {
      handlers.state(msg.live);
    } else {
      handlers[msg.kind](msg.data);
    }
  });
  worker.port.start();
  worker.port.postMessage({ type: 'join', session: id, after });
  window.addEventListener('pagehide', () => worker.port.postMessage({ type: 'leave' }));
}

function follow(timeline) {
  const liveState = document.getElementById('live-state');
  const preview = document.getElementById('preview');
  connect(timeline.dataset.session, timeline.dataset.after, {
    state(live) {
      state.live = live;
      liveState.textContent = live ? 'Live: new events appear as they happen.' : 'Disconnected: reconnecting…';
    },
    preview_start(data) {
      const f = JSON.parse(data);
      if (document.getElementById(`prev-${f.id}`) || document.getElementById(`ev-${f.id}`)) return;
      const box = document.createElement('div');
      box.id = `prev-${f.id}`;
      box.className = `entry preview-entry kind-${f.kind === 'agent.thinking' ? 'thinking' : 'agent'}`;
      const head = document.createElement('div');
      head.className = 'entry-head';
      head.textContent = f.kind === 'agent.thinking' ? 'Thinking (streaming)' : 'Agent (streaming)';
      const text = document.createElement('pre');
      text.className = 'text preview-text';
      box.append(head, text);
      preview.append(box);
    },
    preview(data) {
      const f = JSON.parse(data);
      const text = document.querySelector(`#prev-${CSS.escape(f.id)} .preview-text`);
      if (text) text.textContent += f.text;
    },
    event(data) {
      const f = JSON.parse(data);
      document.getElementById(`prev-${f.id}`)?.remove();
      if (document.getElementById(`ev-${f.id}`)) return; // the page shows it already
      state.events += 1;
      state.seen[f.id] = Date.now(); // wall clock, as processed_at
      timeline.insertAdjacentHTML('beforeend', f.html); // rendered and escaped by the server
      followEnd();
      if (f.ref) {
        document.querySelectorAll(`form[data-for="${CSS.escape(f.ref)}"]`).forEach((form) => { form.hidden = true; });
      }
      (f.pending || []).forEach((pid) => {
        document.querySelectorAll(`form[data-for="${CSS.escape(pid)}"]`).forEach((form) => { form.hidden = false; });
      });
    },
    summary(data) {
      const f = JSON.parse(data);
      const status = document.querySelector('#status .status');
      if (status && f.status) {
        status.className = `status status-${f.status}`;
        status.lastChild.textContent = f.status;
      }
      if (f.usage) document.getElementById('usage').textContent = f.usage;
      if (f.outputs) document.getElementById('outputs').innerHTML = f.outputs; // rendered and escaped by the server
    },
  });
}

function start() {
  const timeline = document.getElementById('timeline');
  if (timeline) follow(timeline);
  state.ready = true;
}

if (document.readyState === 'loading') {
  document.addEventListener('DOMContentLoaded', start);
} else {
  start();
}
