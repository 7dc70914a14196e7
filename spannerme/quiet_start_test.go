package spannerme

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
)

// Issue 19, item 5: a default client on loopback starts without a WARN line. Native metrics
// being turned off is expected, so it is said once at INFO.
func TestClient_DefaultStartLogsNoWarn(t *testing.T) {
	b := startSpannerBackend(t, 1)
	logs := &syncBuffer{}
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, b.eps[0].Addr())})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, spanner.ClientConfig{}, o, fastSettings(logs), clientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	defer client.Close()
	if _, err := countAccounts(ctx, client); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if strings.Contains(out, "level=WARN") {
		t.Errorf("a default client logged a WARN line:\n%s", out)
	}
	if n := strings.Count(out, "native metrics are turned off"); n != 1 || !strings.Contains(out, `level=INFO msg="spannerme: the Spanner client's native metrics`) {
		t.Errorf("native metrics notice logged %d times, want once at INFO:\n%s", n, out)
	}
}
