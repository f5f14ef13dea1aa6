package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/db"
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

// TestDatabaseUnavailableIs503: a request that found PostgreSQL down gets
// a retryable 503 overloaded_error naming no internal cause.
func TestDatabaseUnavailableIs503(t *testing.T) {
	t.Parallel()
	a := &API{deps: Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, echo: echo.New()}
	a.echo.HTTPErrorHandler = a.handleError
	a.echo.Use(requestID)
	a.echo.GET("/down", func(echo.Context) error {
		return fmt.Errorf("get session: %w: dial tcp 127.0.0.1:5432: connection refused", db.ErrUnavailable)
	})
	rec := httptest.NewRecorder()
	a.echo.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/down", nil))
	var env struct {
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || rec.Code != http.StatusServiceUnavailable || env.Error.Type != "overloaded_error" {
		t.Fatalf("status %d body %s, want 503 overloaded_error", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "5432") || rec.Header().Get("x-should-retry") == "false" {
		t.Errorf("response leaks the cause or forbids a retry: %v %s", rec.Header(), rec.Body)
	}
}
