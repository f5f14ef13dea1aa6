package wire

import (
	"errors"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

func newClient(t *testing.T, srv *testserver.Server, opts ...option.RequestOption) anthropic.Client {
	t.Helper()
	base := []option.RequestOption{
		option.WithBaseURL(srv.BaseURL),
		option.WithAPIKey(srv.APIKey),
		option.WithMaxRetries(0),
	}
	return anthropic.NewClient(append(base, opts...)...)
}

// wantAPIError asserts that err is an SDK API error with the given status.
func wantAPIError(t *testing.T, err error, status int) {
	t.Helper()
	_ = apiErrorWithStatus(t, err, status)
}

// apiErrorWithStatus is wantAPIError returning the error for more checks.
func apiErrorWithStatus(t *testing.T, err error, status int) *anthropic.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("expected an API error with status %d, got success", status)
	}
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("expected *anthropic.Error with status %d, got %T: %v", status, err, err)
	}
	if apiErr.StatusCode != status {
		t.Fatalf("status = %d, want %d (body: %s)", apiErr.StatusCode, status, apiErr.RawJSON())
	}
	if apiErr.Response != nil && apiErr.Response.Header.Get("request-id") == "" {
		t.Errorf("error response has no request-id header")
	}
	return apiErr
}

var _ = http.StatusOK
