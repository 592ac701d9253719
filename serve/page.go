package serve

import (
	"embed"
	"net/http"
)

// web holds the chart page and its one library, committed under web/ so a
// build needs no npm (scripts/refresh-chart-lib.sh refreshes the library).
//
//go:embed web/index.html web/chart.js web/vendor/lightweight-charts.standalone.production.js web/vendor/LICENSE-lightweight-charts.txt
var web embed.FS

// page registers the chart page and its static files.
func page(mux *http.ServeMux) {
	file := func(name, ctype string) http.HandlerFunc {
		data, err := web.ReadFile(name)
		return func(w http.ResponseWriter, r *http.Request) {
			if err != nil { // cannot happen: go:embed checked the files at build time
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			h := w.Header()
			h.Set("Content-Type", ctype)
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self' ws: wss:; img-src 'self' data:")
			h.Set("Cache-Control", "no-cache")
			w.Write(data)
		}
	}
	mux.HandleFunc("GET /{$}", file("web/index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /static/chart.js", file("web/chart.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /static/lightweight-charts.js", file("web/vendor/lightweight-charts.standalone.production.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /static/LICENSE-lightweight-charts.txt", file("web/vendor/LICENSE-lightweight-charts.txt", "text/plain; charset=utf-8"))
}
