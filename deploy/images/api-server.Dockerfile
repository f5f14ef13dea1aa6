# The api-server image: one static Go binary (CGO off) FROM scratch, with CA
# certificates, /etc/passwd naming the non-root user 65532 and a 1777 /tmp.
# Nothing is pulled: the context is staged by `scripts/build-images.sh`
# (`make images`), which builds the binary with the version and commit
# stamped in. release.Dockerfile is the multi-stage equivalent for builders
# that can pull golang; its final stages must stay instruction-for-instruction
# equal to this file (deploy/images_test.go checks it).
FROM scratch AS api-server
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="mango-api-server" \
      org.opencontainers.image.source="https://github.com/mangohq/mango" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY rootfs/ /
COPY api-server /api-server
USER 65532:65532
ENV MANGO_HTTP_ADDR=0.0.0.0:8080 MANGO_GRPC_ADDR=0.0.0.0:8081 MANGO_LOG_FORMAT=json
EXPOSE 8080 8081
ENTRYPOINT ["/api-server"]
