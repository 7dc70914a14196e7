package export

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/monitoring/apiv3/v2/monitoringpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
)

// sink is a MetricService that records the project of each CreateServiceTimeSeries call and
// the user agent it came with.
type sink struct {
	monitoringpb.UnimplementedMetricServiceServer
	got chan string
}

func (s *sink) CreateServiceTimeSeries(ctx context.Context, r *monitoringpb.CreateTimeSeriesRequest) (*emptypb.Empty, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.got <- r.GetName() + " " + md.Get("user-agent")[0]
	return &emptypb.Empty{}, nil
}

// A Conn takes MetricService methods only, and sends them to SPANNER_MONITORING_HOST with the
// caller's client options (here: plaintext, no authentication, a user agent).
func TestConnSendsToMonitoringHostWithCallerOptions(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{got: make(chan string, 1)}
	srv := grpc.NewServer()
	monitoringpb.RegisterMetricServiceServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	t.Setenv(HostEnv, lis.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, []option.ClientOption{option.WithoutAuthentication(), option.WithUserAgent("myapp/1.0"),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for method, want := range map[string]bool{
		Service + "CreateServiceTimeSeries":              true,
		"/google.spanner.v1.Spanner/ExecuteStreamingSql": false,
	} {
		if c.Takes(method) != want {
			t.Errorf("Takes(%q) = %v, want %v", method, !want, want)
		}
	}
	err = c.Invoke(ctx, Service+"CreateServiceTimeSeries", &monitoringpb.CreateTimeSeriesRequest{Name: "projects/p"}, &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-s.got; !strings.HasPrefix(got, "projects/p myapp/1.0 grpc-go/") {
		t.Errorf("the sink got %q; want the call with the caller's user agent", got)
	}
}
