// The harness's timestamp authority: sigstore's timestamp-server REST API
// (github.com/sigstore/timestamp-authority/pkg/server) on a loopback address, with an
// in-memory signer and no NTP monitoring. Our own main because the upstream `serve`
// command always binds Prometheus metrics to :2112 on all interfaces (and exits if that
// port is taken), which allows one TSA per machine; this one serves no metrics.
package main

import (
	"flag"
	"log"
	"time"

	tsalog "github.com/sigstore/timestamp-authority/pkg/log"
	"github.com/sigstore/timestamp-authority/pkg/server"
	"github.com/spf13/viper"
)

func main() {
	host := flag.String("host", "127.0.0.1", "listen host")
	port := flag.Int("port", 0, "listen port")
	flag.Parse()
	tsalog.ConfigureLogger("dev")
	viper.Set("timestamp-signer", "memory")
	viper.Set("timestamp-signer-hash", "sha256")
	timeout := 30 * time.Second
	srv := server.NewRestAPIServer(*host, *port, []string{"http"}, false, timeout, timeout)
	log.Printf("timestamp authority listening on %s:%d", *host, *port)
	if err := srv.Serve(); err != nil {
		log.Fatal(err)
	}
}
