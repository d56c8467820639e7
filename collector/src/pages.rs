//! Server-rendered HTML pages (no scripts, no front-end build): the groups list, one group, one report. Every
//! value from a report or the database is HTML-escaped.

use crate::db::{GroupSummary, ReportRow};
use crate::http::{GroupDetail, GroupsParams};

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse}td,th{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}\
pre{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:13px}.n{text-align:right}.dmg{color:#b00}\
nav a{margin-right:1em}";

/// HTML-escapes text.
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// `YYYY-MM-DD HH:MM:SS` UTC of ms since the Unix epoch.
pub(crate) fn time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's days_from_civil, inverted).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} - crash collector</title>\
         <style>{STYLE}</style></head><body><nav><a href=\"/\">Crash groups</a></nav>\n{body}</body></html>\n",
        esc(title)
    )
}

/// The groups page.
pub(crate) fn groups(groups: &[GroupSummary], versions: &[String], p: &GroupsParams) -> String {
    let sort = p.sort.as_deref().unwrap_or("count");
    let version = p.version.as_deref().unwrap_or("");
    let mut b = String::from("<h1>Crash groups</h1>\n<form method=\"get\" action=\"/\">Sort by <select name=\"sort\">");
    for (v, label) in [("count", "count"), ("last_seen", "last seen")] {
        let sel = if sort == v { " selected" } else { "" };
        b.push_str(&format!("<option value=\"{v}\"{sel}>{label}</option>"));
    }
    b.push_str("</select> App version <select name=\"version\"><option value=\"\">all</option>");
    for v in versions {
        let sel = if version == v { " selected" } else { "" };
        let label = if v.is_empty() { "(unknown)" } else { v };
        b.push_str(&format!("<option value=\"{}\"{sel}>{}</option>", esc(v), esc(label)));
    }
    b.push_str("</select> <button type=\"submit\">Show</button></form>\n");
    if groups.is_empty() {
        b.push_str("<p>No crash reports yet.</p>\n");
        return page("Crash groups", &b);
    }
    b.push_str(
        "<table id=\"groups\"><tr><th>Crash</th><th>Project</th><th class=\"n\">Reports</th><th>First seen (UTC)</th>\
         <th>Last seen (UTC)</th></tr>\n",
    );
    for g in groups {
        b.push_str(&format!(
            "<tr><td><a class=\"group\" href=\"/groups/{}\">{}</a></td><td>{}</td><td class=\"n\">{}</td><td>{}</td>\
             <td>{}</td></tr>\n",
            esc(&g.id),
            esc(&g.title),
            esc(&g.project),
            g.count,
            time(g.first_seen_ms),
            time(g.last_seen_ms)
        ));
    }
    b.push_str("</table>\n");
    page("Crash groups", &b)
}

fn version_table(title: &str, v: &[(String, i64)]) -> String {
    let mut b = format!("<h2>{}</h2><table><tr><th>Version</th><th class=\"n\">Reports</th></tr>", esc(title));
    for (name, n) in v {
        let name = if name.is_empty() { "(unknown)" } else { name };
        b.push_str(&format!("<tr><td>{}</td><td class=\"n\">{n}</td></tr>", esc(name)));
    }
    b.push_str("</table>\n");
    b
}

/// One group's page.
pub(crate) fn group(g: &GroupDetail) -> String {
    let mut b = format!("<h1>{}</h1>\n", esc(&g.title));
    b.push_str(&format!(
        "<p>Project {} &middot; {} report{} &middot; first seen {} UTC &middot; last seen {} UTC</p>\n",
        esc(&g.project),
        g.count,
        if g.count == 1 { "" } else { "s" },
        time(g.first_seen_ms),
        time(g.last_seen_ms)
    ));
    b.push_str(&format!(
        "<h2>Crashed thread (newest report)</h2>\n<pre id=\"stack\">{}</pre>\n<h2>Signature</h2>\n<pre>{}</pre>\n",
        esc(&g.stack),
        esc(&g.signature)
    ));
    b.push_str(&version_table("App versions", &g.app_versions));
    b.push_str(&version_table("OS versions", &g.os_versions));
    b.push_str(
        "<h2>Reports (newest first)</h2>\n<table id=\"reports\"><tr><th>Report</th><th>Received (UTC)</th>\
         <th>App version</th><th>OS version</th><th></th></tr>\n",
    );
    for r in &g.reports {
        b.push_str(&format!(
            "<tr><td><a class=\"report\" href=\"/reports/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            esc(&r.id),
            esc(&r.id),
            time(r.received_ms),
            esc(&r.app_version),
            esc(&r.os_version),
            if r.damaged { "<span class=\"dmg\">damaged</span>" } else { "" }
        ));
    }
    b.push_str("</table>\n");
    page(&g.title, &b)
}

/// One report's page: its Apple text and downloads.
pub(crate) fn report(r: &ReportRow, crash_text: &str, has_ips: bool) -> String {
    let mut b = format!("<h1>Report {}</h1>\n", esc(&r.id));
    b.push_str(&format!(
        "<p><a href=\"/groups/{}\">Its group</a> &middot; received {} UTC &middot; {} bytes</p>\n",
        esc(&r.group_id),
        time(r.received_ms),
        r.size
    ));
    if r.damaged() {
        b.push_str(&format!(
            "<p class=\"dmg\">This report arrived damaged; what survived is shown.</p><pre>{}</pre>\n",
            esc(&r.problems)
        ));
    }
    let id = esc(&r.id);
    b.push_str(&format!("<p>Download: <a href=\"/reports/{id}/download?format=crash\">.crash</a>"));
    if has_ips {
        b.push_str(&format!(" &middot; <a href=\"/reports/{id}/download?format=ips\">.ips</a>"));
    }
    b.push_str(&format!(
        " &middot; <a href=\"/reports/{id}/download?format=raw\">raw report</a> &middot; \
         <a href=\"/api/v1/reports/{id}?format=json\">JSON</a></p>\n"
    ));
    b.push_str(&format!("<pre id=\"crash\">{}</pre>\n", esc(crash_text)));
    page(&format!("Report {}", r.id), &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_times() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        assert_eq!(time(0), "1970-01-01 00:00:00");
        assert_eq!(time(1_700_000_000_123), "2023-11-14 22:13:20");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00");
    }
}
