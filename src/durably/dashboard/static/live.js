// Keeps the page's live part up to date. Its element names, in data-live, the URL of an
// event stream that sends the part's new HTML (an "update" event) whenever it changed.
// Nothing is replaced while someone uses a form in the part: while a field of it has the
// focus, the last update waits until the field is left; once a field has been edited,
// updates wait for good (the form is the user's until sent, as a reload would lose it).
// The stream is closed while the
// page is hidden (a browser keeps at most 6 connections to a server) and opened again,
// with what it last showed, when the page is seen again.
const live = document.querySelector("[data-live]");
if (live) {
  let source = null;
  let waiting = null;
  let edited = false;
  const busy = () => {
    const field = document.activeElement;
    return edited || (live.contains(field) && field.matches("input, select, textarea"));
  };
  const show = (html) => {
    if (busy()) {
      waiting = html;
    } else {
      live.innerHTML = html;
      waiting = null;
    }
  };
  const open = () => {
    source = new EventSource(live.dataset.live);
    source.addEventListener("update", (event) => {
      const url = new URL(live.dataset.live, location.href);
      url.searchParams.set("seen", event.lastEventId);
      live.dataset.live = url.pathname + url.search;
      show(event.data);
    });
  };
  live.addEventListener("input", () => { edited = true; });
  live.addEventListener("focusout", () => {
    setTimeout(() => { if (waiting !== null) show(waiting); }, 0);
  });
  document.addEventListener("visibilitychange", () => {
    if (document.hidden && source) {
      source.close();
      source = null;
    } else if (!document.hidden && !source) {
      open();
    }
  });
  if (!document.hidden) open();
}
