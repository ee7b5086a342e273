// The harness's referrers-capable OCI registry: cue-labs' in-memory registry
// (cuelabs.dev/go/oci/ociregistry) behind net/http on a loopback address. Its options
// emulate other registries' quirks, for capability-detection tests.
package main

import (
	"flag"
	"log"
	"net/http"

	"cuelabs.dev/go/oci/ociregistry/ocimem"
	"cuelabs.dev/go/oci/ociregistry/ociserver"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	noReferrers := flag.Bool("disable-referrers-api", false, "answer the referrers API with 404")
	pageSize := flag.Int("max-list-page-size", 0, "page tag lists like ECR (0: no limit)")
	immutable := flag.Bool("immutable-tags", false, "refuse moving or deleting tags")
	flag.Parse()
	backend := ocimem.NewWithConfig(&ocimem.Config{ImmutableTags: *immutable})
	handler := ociserver.New(backend, &ociserver.Options{
		DisableReferrersAPI: *noReferrers,
		MaxListPageSize:     *pageSize,
	})
	log.Printf("ociregistry listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, handler))
}
