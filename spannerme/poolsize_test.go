package spannerme

import (
	"context"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// The sizing rule of each endpoint's channel pool (DefaultPoolSize).
func TestPoolSizingRule(t *testing.T) {
	pool := func(minSize, maxSize uint32) *pb.ApiConfig {
		return &pb.ApiConfig{ChannelPool: &pb.ChannelPoolConfig{MinSize: minSize, MaxSize: maxSize}}
	}
	dcp := func(initial, maxCh int) spanner.DynamicChannelPoolConfig {
		return spanner.DynamicChannelPoolConfig{DCPEnabled: true, DCPInitialChannels: initial, DCPMaxChannels: maxCh}
	}
	for _, tc := range []struct {
		name             string
		cfg              *pb.ApiConfig
		numChannels      int
		dcp              spanner.DynamicChannelPoolConfig
		wantMin, wantMax uint32
	}{
		{"defaults", nil, 0, spanner.DynamicChannelPoolConfig{}, DefaultPoolSize, DefaultMaxPoolSize},
		{"NumChannels is MinSize", nil, 6, spanner.DynamicChannelPoolConfig{}, 6, DefaultMaxPoolSize},
		{"NumChannels above the default maximum", nil, 16, spanner.DynamicChannelPoolConfig{}, 16, 16},
		{"MaxSize alone: fixed, as upstream", pool(0, 8), 6, spanner.DynamicChannelPoolConfig{}, 8, 8},
		{"MinSize alone", pool(2, 0), 6, spanner.DynamicChannelPoolConfig{}, 2, DefaultMaxPoolSize},
		{"both", pool(3, 20), 6, spanner.DynamicChannelPoolConfig{}, 3, 20},
		{"MinSize above MaxSize is capped", pool(9, 5), 0, spanner.DynamicChannelPoolConfig{}, 5, 5},
		{"DCP bounds", nil, 0, dcp(2, 6), 2, 6},
		{"NumChannels before DCP", nil, 3, dcp(2, 6), 3, 6},
		{"GRPCgcpConfig before DCP", pool(1, 2), 0, dcp(5, 6), 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := spanner.ClientConfig{NumChannels: tc.numChannels, DynamicChannelPoolConfig: tc.dcp} //lint:ignore SA1019 the rule under test
			tr, err := planTransport(config, false)
			if err != nil {
				t.Fatal(err)
			}
			got := effectiveAPIConfig(tr.poolSizes(tc.cfg), 0, 0).GetChannelPool()
			if got.GetMinSize() != tc.wantMin || got.GetMaxSize() != tc.wantMax || got.GetMaxConcurrentStreamsLowWatermark() != DefaultStreamsPerChannel {
				t.Errorf("pool %v, want MinSize %d, MaxSize %d, watermark %d", got, tc.wantMin, tc.wantMax, DefaultStreamsPerChannel)
			}
			if tc.cfg != nil && tc.cfg.ChannelPool.MaxConcurrentStreamsLowWatermark != 0 {
				t.Error("the caller's GRPCgcpConfig was modified")
			}
		})
	}
}

// With the default configuration, an endpoint whose front end allows 100 streams per
// connection carries more concurrent streams than MinSize x 100: the pool grows (F19).
// 450 streams stay open at once; with a pool stuck at 4 channels, 50 of them would wait.
func TestCase_F19_PoolGrowsPastTheStreamLimit(t *testing.T) {
	const streams = 450
	fe := spannermetest.NewFrontendTB(t, startServer(t, "E1"), spannermetest.WithMaxConcurrentStreams(spannermetest.GoogleFrontendMaxConcurrentStreams))
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, fe.Addr())}), fastSettings(nil))
	waitServedBy(t, context.Background(), gme, "E1", 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hold, release := context.WithCancel(ctx) // ends every stream
	defer release()
	req := &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{
		{}, {IntervalUs: int32(time.Minute / time.Microsecond)}}} // one response at once, then wait
	var started, wg sync.WaitGroup
	errs := make(chan error, streams)
	started.Add(streams)
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := testpb.NewTestServiceClient(gme).StreamingOutputCall(hold, req)
			if err == nil {
				_, err = s.Recv()
			}
			started.Done()
			if err != nil {
				errs <- err
				return
			}
			<-hold.Done()
		}()
	}
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()
	select {
	case <-allStarted:
	case <-ctx.Done():
		t.Fatalf("not every stream got its first response; the frontend has %d connections", fe.Stats().Active)
	}
	channels := fe.Stats().Active - latencyConns
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if channels <= DefaultPoolSize || channels > DefaultMaxPoolSize {
		t.Errorf("%d concurrent streams used %d channels, want more than %d and at most %d", streams, channels, DefaultPoolSize, DefaultMaxPoolSize)
	}
	t.Logf("%d concurrent streams through a 100-stream frontend used %d channels", streams, channels)
}
