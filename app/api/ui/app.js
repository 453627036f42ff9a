// tasklease's web view: the log-in, the theme and the pages by address. Each page is a
// module in pages/ and is listed once in ROUTES, which also makes the top bar's links.
import { $, KEY, api, el, liveStatus, logout, session } from "./core.js";
import { chartsPage } from "./pages/charts.js";
import { alerts } from "./pages/alerts.js";
import { jobPage } from "./pages/job.js";
import { kinds } from "./pages/kinds.js";
import { deadLetters, schedules } from "./pages/lists.js";
import { overview } from "./pages/overview.js";
import { workers } from "./pages/workers.js";

const THEME = "tasklease.theme";
// [address (a string, or a RegExp whose groups are the page's arguments), page, nav label]
const ROUTES = [
  ["/", overview, "Overview"],
  [/^\/jobs\/([0-9a-f-]{36})$/, jobPage, null],
  ["/dead-letters", deadLetters, "Dead letters"],
  ["/schedules", schedules, "Schedules"],
  ["/charts", chartsPage, "Charts"],
  ["/kinds", kinds, "Kinds"],
  ["/workers", workers, "Workers"],
  ["/alerts", alerts, "Alerts"],
];

function showLogin(why) {
  $("login").hidden = false;
  $("view").replaceChildren();
  $("nav").hidden = true;
  $("logout").hidden = true;
  $("who").textContent = "";
  $("login-error").textContent = why;
  $("key").focus();
}
async function login(key) {
  sessionStorage.setItem(KEY, key.trim());
  try {
    session.me = await api("/v1/me", { quiet: true });
  } catch (err) {
    sessionStorage.removeItem(KEY);
    return showLogin(err.status === 401 ? "That key was refused." : `The API said ${err.message}`);
  }
  const me = session.me;
  $("login").hidden = true;
  $("nav").hidden = false;
  $("logout").hidden = false;
  $("who").textContent = `${me.tenant}${me.admin ? " · admin" : ""}`;
  route();
}
function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}
function toggleTheme() {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  const next = dark ? "light" : "dark";
  localStorage.setItem(THEME, next);
  applyTheme(next);
}
function route() {
  if (!session.me) return;
  if (session.stopLive) { session.stopLive(); session.stopLive = null; }
  liveStatus(false);
  const hash = location.hash.replace(/^#/, "") || "/";
  const view = $("view");
  view.replaceChildren();
  let page = overview;
  let args = [];
  for (const [at, fn] of ROUTES) {
    const m = typeof at === "string" ? (at === hash ? [hash] : null) : hash.match(at);
    if (m) { page = fn; args = m.slice(1); break; }
  }
  page(view, ...args).catch((err) => view.replaceChildren(el("p", { class: "error" }, err.message)));
}

// --- start ------------------------------------------------------------------------------------
session.showLogin = showLogin;
session.route = route;
$("nav").replaceChildren(...ROUTES.filter((r) => r[2]).map(([at, , label]) => el("a", { href: `#${at}` }, label)));
applyTheme(localStorage.getItem(THEME));
$("theme").addEventListener("click", toggleTheme);
$("logout").addEventListener("click", () => logout(""));
$("login-form").addEventListener("submit", (e) => { e.preventDefault(); login($("key").value); $("key").value = ""; });
window.addEventListener("hashchange", route);
if (sessionStorage.getItem(KEY)) login(sessionStorage.getItem(KEY)); else showLogin("");
