package httpapi

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

func TestPanicBecomesInternalError(t *testing.T) {
	t.Parallel()
	a := &API{deps: Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, echo: echo.New()}
	a.echo.HTTPErrorHandler = a.handleError
	a.echo.Use(requestID, a.recoverPanics)
	a.echo.GET("/boom", func(echo.Context) error { panic("secret internal detail") })
	rec := httptest.NewRecorder()
	a.echo.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/boom", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status = %d, want 500", rec.Code)
	}
	var env struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Type != "error" || env.Error.Type != "api_error" {
		t.Fatalf("body = %s", rec.Body)
	}
	if strings.Contains(rec.Body.String(), "secret") || strings.Contains(rec.Body.String(), "goroutine") {
		t.Errorf("panic detail leaked: %s", rec.Body)
	}
}
