#!/usr/bin/env bash
# mtls_e2e.sh - mutual TLS end to end (docs/security.md): a CA, the
# daemon's certificate (SAN IP:127.0.0.1), a client certificate it signed
# and one another CA signed, made with openssl here; rtraind with
# --tls-client-ca and --tokens. Through the CLI and librtrain
# (test_client_mtls): a client without a certificate, or with the other
# CA's, is refused (exit 3 / UNAVAILABLE), a plaintext client too, the
# right certificate without the token is UNAUTHENTICATED (exit 4), and the
# right certificate with the token trains iris to val_accuracy >= 0.9 (by
# flags and by the RTRAIN_TLS_* variables). The Python client's side is in
# tests/python/test_security.py.
#   usage: mtls_e2e.sh RTRAIND RTRAIN TEST_CLIENT_MTLS SOURCE_DIR
set -uo pipefail
rtraind=$1 rtrain=$2 client=$3 src=$4
ex=$src/examples/iris
. "$src/tests/lib/e2e.sh"
pki=$tmp/pki
mkdir -p "$pki"
EC=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
if ! (cd "$pki" && exec >openssl.log 2>&1 &&
      echo "subjectAltName=IP:127.0.0.1" >san.ext &&
      openssl req -x509 "${EC[@]}" -keyout ca.key -out ca.pem -days 2 -subj /CN=rtrain-mtls-ca &&
      openssl req "${EC[@]}" -keyout srv.key -out srv.csr -subj /CN=rtraind &&
      openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem \
        -days 2 -extfile san.ext &&
      openssl req "${EC[@]}" -keyout cli.key -out cli.csr -subj /CN=alice &&
      openssl x509 -req -in cli.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cli.pem -days 2 &&
      openssl req -x509 "${EC[@]}" -keyout other-ca.key -out other-ca.pem -days 2 \
        -subj /CN=other-ca &&
      openssl req "${EC[@]}" -keyout other.key -out other.csr -subj /CN=mallory &&
      openssl x509 -req -in other.csr -CA other-ca.pem -CAkey other-ca.key -CAcreateserial \
        -out other.pem -days 2); then
  echo "openssl failed (the openssl CLI is needed: Debian's openssl)"; cat "$pki/openssl.log"
  exit 1
fi
"$rtraind" --new-token alice >"$pki/tokens.txt" 2>"$pki/token.err" || exit 1
awk '{print $NF}' "$pki/token.err" >"$pki/token"
token=$(cat "$pki/token")
[ ${#token} -eq 64 ] && ok "a token for alice" || bad "token '$token'"
start_daemon "$tmp/daemon.log" --log-level warn --tls-cert "$pki/srv.pem" \
  --tls-key "$pki/srv.key" --tls-client-ca "$pki/ca.pem" --tokens "$pki/tokens.txt" || exit 1
S=(--server "$addr" --token-file "$pki/token")
CA=(--tls-ca "$pki/ca.pem")

# --- the CLI
expect_rc 3 "no client certificate: refused" -- "$rtrain" info "${S[@]}" "${CA[@]}"
expect_rc 3 "another CA's client certificate: refused" -- "$rtrain" info "${S[@]}" "${CA[@]}" \
  --tls-cert "$pki/other.pem" --tls-key "$pki/other.key"
expect_rc 3 "plaintext to the TLS port: refused" -- "$rtrain" info "${S[@]}"
expect_rc 4 "the right certificate, no token: UNAUTHENTICATED" -- "$rtrain" info --server "$addr" \
  "${CA[@]}" --tls-cert "$pki/cli.pem" --tls-key "$pki/cli.key"
has "$tmp/err" "UNAUTHENTICATED" "the error says UNAUTHENTICATED"
expect_rc 0 "the right certificate and token: fit" -- "$rtrain" fit "${S[@]}" "${CA[@]}" \
  --tls-cert "$pki/cli.pem" --tls-key "$pki/cli.key" --model "$ex/model.json" \
  --data "$ex/train_shuffled.csv" --val "$ex/val_shuffled.csv" \
  --loss sparse_categorical_crossentropy --lr 0.02 --batch-size 20 --epochs 60 --seed 1 \
  --no-progress
acc=$(sed -n 's/^final:.* val_accuracy \([0-9.]*\).*/\1/p' "$tmp/out")
ge "$acc" 0.9 && ok "trained over mTLS: val_accuracy $acc >= 0.9" || bad "val_accuracy '$acc'"
expect_rc 0 "the same by RTRAIN_TLS_CA/CERT/KEY and RTRAIN_TOKEN_FILE" -- env \
  RTRAIN_TLS_CA="$pki/ca.pem" RTRAIN_TLS_CERT="$pki/cli.pem" RTRAIN_TLS_KEY="$pki/cli.key" \
  RTRAIN_TOKEN_FILE="$pki/token" "$rtrain" info --server "$addr"
has "$tmp/out" "^version" "info answered"

# --- librtrain
expect_rc 0 "librtrain: refused without or with the wrong certificate, trains with the right" \
  -- "$client" "$addr" "$pki" "$token" "$ex"
sed 's/^/     /' "$tmp/out"
expect_rc 0 "the daemon still serves" -- "$rtrain" info "${S[@]}" "${CA[@]}" \
  --tls-cert "$pki/cli.pem" --tls-key "$pki/cli.key"
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
