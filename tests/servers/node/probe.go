// The harness node's test program (one static binary on scratch, no shell in the image):
//
//	probe cat PATH...   print each file (a directory: every file under it, with its path)
//	probe whoami        POST a SelfSubjectReview with the Pod's projected ServiceAccount
//	                    token to https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
//	                    and print the answer (exit 1 unless 201)
//	probe sleep         sleep until SIGTERM
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

const accountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func cat(paths []string) {
	for _, root := range paths {
		err := filepath.WalkDir(root, func(path string, entry fs.DirEntry, err error) error {
			if err != nil || entry.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Printf("%s: %s\n", path, strings.TrimSpace(string(data)))
			return nil
		})
		if err != nil {
			fail("cat %s: %v", root, err)
		}
	}
}

func whoami() {
	token, err := os.ReadFile(accountDir + "/token")
	if err != nil {
		fail("token: %v", err)
	}
	caPEM, err := os.ReadFile(accountDir + "/ca.crt")
	if err != nil {
		fail("ca.crt: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	host := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	request, _ := http.NewRequest("POST", "https://"+host+"/apis/authentication.k8s.io/v1/selfsubjectreviews", bytes.NewBufferString(body))
	request.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	request.Header.Set("Content-Type", "application/json")
	response, err := client.Do(request)
	if err != nil {
		fail("whoami: %v", err)
	}
	defer response.Body.Close()
	answer, _ := io.ReadAll(response.Body)
	fmt.Println(string(answer))
	if response.StatusCode != http.StatusCreated {
		fail("whoami: HTTP %d", response.StatusCode)
	}
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: probe cat PATH... | whoami | sleep")
	}
	switch os.Args[1] {
	case "cat":
		cat(os.Args[2:])
	case "whoami":
		whoami()
	case "sleep":
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
		<-signals
	default:
		fail("unknown command %q", os.Args[1])
	}
}
