package plaintext

import (
	"testing"

	"golang.org/x/oauth2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var plaintextOption = option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))

func staticToken(token string) option.ClientOption {
	return option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token, TokenType: "Bearer"}))
}

// Dials tells plaintext from TLS by the first bytes the connection writes, whether or not
// the caller's dial options make the dial wait for the connection (grpc.WithBlock,
// grpc.WithReturnConnectionError): before, a blocking dial stalled for Timeout, failed, and
// was taken as TLS, so that credentials went out in cleartext.
func TestDials(t *testing.T) {
	blocking := option.WithGRPCDialOption(grpc.WithBlock())                  //lint:ignore SA1019 the caller's option under test
	returnErr := option.WithGRPCDialOption(grpc.WithReturnConnectionError()) //lint:ignore SA1019 the caller's option under test
	for _, tc := range []struct {
		name string
		opts []option.ClientOption
		want bool
	}{
		{"default: TLS", nil, false},
		{"insecure transport credentials", []option.ClientOption{plaintextOption}, true},
		{"insecure, with credentials given", []option.ClientOption{plaintextOption, staticToken("x")}, true},
		{"TLS, with credentials given", []option.ClientOption{staticToken("x")}, false},
		{"insecure, grpc.WithBlock", []option.ClientOption{plaintextOption, blocking, staticToken("x")}, true},
		{"insecure, grpc.WithReturnConnectionError", []option.ClientOption{plaintextOption, returnErr, staticToken("x")}, true},
		{"TLS, grpc.WithBlock", []option.ClientOption{blocking, staticToken("x")}, false},
		{"TLS, grpc.WithReturnConnectionError", []option.ClientOption{returnErr}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Dials(tc.opts); got != tc.want {
				t.Errorf("Dials = %v, want %v", got, tc.want)
			}
		})
	}
}
