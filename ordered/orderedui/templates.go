package orderedui

import (
	"html/template"
	"io/fs"
	"path"
	"strings"
	"time"
)

var funcs = template.FuncMap{
	"dur": fmtDur,
	"abs": func(d time.Duration) time.Duration { return d.Abs() },
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return fmtDur(time.Since(t).Round(time.Second)) + " ago"
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
	},
	"short": func(s string) string { return truncate(oneLine(s), 200) },
	"add":   func(a, b int64) int64 { return a + b },
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// parseTemplates builds one template set per page: the layout, the shared parts, the page.
func parseTemplates() (map[string]*template.Template, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	files, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(assets, f)
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}
