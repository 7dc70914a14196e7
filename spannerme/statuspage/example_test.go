package statuspage_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/statuspage"
)

// The status page, as JSON: a group whose only endpoint refuses connections says so, with
// the reason, as soon as the first connection attempt has failed. (In a browser, the same
// handler serves the HTML page.)
func ExampleHandler() {
	gme, err := spannerme.NewGCPMultiEndpointWithSettings(&grpcgcp.GCPMultiEndpointOptions{
		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
			"default": {Endpoints: []string{"127.0.0.1:1"}}, // nothing listens there
		},
		Default: "default",
	}, spannerme.Settings{
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		MeterProvider: noop.NewMeterProvider(),
	}, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer gme.Close()
	srv := httptest.NewServer(statuspage.Handler(gme))
	defer srv.Close()

	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		res, err := http.Get(srv.URL + "/status.json")
		if err != nil {
			log.Fatal(err)
		}
		var st spannerme.Status
		err = json.NewDecoder(res.Body).Decode(&st)
		res.Body.Close()
		if err != nil {
			log.Fatal(err)
		}
		g, p := st.Groups[0], st.Pools[0]
		if p.LastError != nil && p.Connectivity == "TRANSIENT_FAILURE" && g.Endpoints[0].State == spannerme.Unavailable {
			fmt.Printf("group %s: current %s is %v\n", g.Name, g.Current, g.Endpoints[0].State)
			fmt.Printf("pool %s: %s, last error: %s\n", p.Endpoint, p.Connectivity, p.LastError.Kind)
			return
		}
	}
	fmt.Println("no connection error after 10s")
	// Output:
	// group default: current 127.0.0.1:1 is Unavailable
	// pool 127.0.0.1:1: TRANSIENT_FAILURE, last error: refused
}
