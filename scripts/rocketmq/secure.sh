# Secure instance of scripts/rocketmq-server (sourced by it; FERRYMQ_ROCKETMQ_SECURE=1 or --secure):
# TLS enforced on the proxy's ports, ACL 2.0 authentication and authorization on.
#
# Everything lives in $SECURE_DIR (mode 0700), made once and kept across restarts:
#   ca.key, ca.pem            a throwaway CA (regenerated with the server certificate when it
#                             expires within a day)
#   server.key, server.pem    the server certificate for IP 127.0.0.1 and DNS localhost
#   users.json                {"admin": {"access_key": ..., "secret_key": ...}, ...} (mode 0600)
# The secrets are random (openssl rand) and never printed.

# The users (role -> access key). admin and inner are Super users the broker creates itself at
# start (initAuthenticationUser, innerClientAuthenticationCredentials); client and limited are
# Normal users made by secure_admin_ops, with the ACLs below.
SECURE_ROLES=(admin inner client limited)
declare -A SECURE_USER=([admin]=ferry-admin [inner]=ferry-inner [client]=ferry-client [limited]=ferry-limited)
declare -A SECURE_SECRET=()
# role -> "RESOURCES ACTIONS" (comma-separated lists), each granted with decision Allow.
SECURE_ACLS=(
    "client Topic:* Pub,Sub"
    "client Group:* Sub"
    "limited Topic:ferry-open-* Pub,Sub"
    "limited Group:* Sub"
)

AUTHN_PROVIDER=org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider
AUTHZ_PROVIDER=org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider

secure_openssl() { openssl "$@" >>"$LOGS/openssl.out" 2>&1 || die "openssl $1 failed (see $LOGS/openssl.out)"; }

secure_make_certificates() {
    local d=$SECURE_DIR
    if [[ -s $d/ca.pem && -s $d/server.pem && -s $d/server.key ]] &&
        openssl x509 -checkend 86400 -noout -in "$d/server.pem" >/dev/null 2>&1; then
        return 0
    fi
    command -v openssl >/dev/null || die "openssl is required for the secure instance"
    log "generating a CA and a server certificate for 127.0.0.1 in $d"
    # ECDSA P-256: generated in milliseconds (an RSA key costs seconds on a loaded machine).
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1)
    secure_openssl req -x509 "${ec[@]}" -nodes -days 30 -keyout "$d/ca.key" -out "$d/ca.pem" \
        -subj "/CN=ferrymq-test-ca" -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign"
    # PKCS#8 key ("BEGIN PRIVATE KEY"), the form Netty's SslContextBuilder reads.
    secure_openssl req "${ec[@]}" -nodes -keyout "$d/server.key" -out "$d/server.csr" \
        -subj "/CN=localhost"
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" >"$d/server.ext"
    secure_openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
        -days 30 -out "$d/server.pem" -extfile "$d/server.ext"
    chmod 600 "$d/ca.key" "$d/server.key"
}

secure_load_users() {
    local role line
    for role in "${SECURE_ROLES[@]}"; do
        line=$(grep -o "\"$role\": {\"access_key\": \"[^\"]*\", \"secret_key\": \"[^\"]*\"}" "$SECURE_DIR/users.json" 2>/dev/null) ||
            return 1
        SECURE_SECRET[$role]=$(sed 's/.*"secret_key": "\([^"]*\)".*/\1/' <<<"$line")
        [[ -n ${SECURE_SECRET[$role]} ]] || return 1
    done
}

secure_make_users() {
    secure_load_users && return 0
    command -v openssl >/dev/null || die "openssl is required for the secure instance"
    local role sep='' json='{'
    for role in "${SECURE_ROLES[@]}"; do
        SECURE_SECRET[$role]=$(openssl rand -hex 16)
        json+="$sep"$'\n'"  \"$role\": {\"access_key\": \"${SECURE_USER[$role]}\", \"secret_key\": \"${SECURE_SECRET[$role]}\"}"
        sep=,
    done
    (umask 077 && printf '%s\n}\n' "$json" >"$SECURE_DIR/users.json.tmp")
    mv "$SECURE_DIR/users.json.tmp" "$SECURE_DIR/users.json"
    secure_load_users || die "could not read back $SECURE_DIR/users.json"
}

# Certificates, users, and the admin tools' credentials (mqadmin reads conf/tools.yml).
secure_prepare() {
    mkdir -p "$SECURE_DIR" "$HOME_DIR/conf" "$LOGS"
    chmod 700 "$SECURE_DIR"
    secure_make_certificates
    secure_make_users
    (umask 077 && printf 'accessKey: %s\nsecretKey: %s\n' "${SECURE_USER[admin]}" "${SECURE_SECRET[admin]}" \
        >"$HOME_DIR/conf/tools.yml")
}

# Loads the secrets when they exist (status, create, mqadmin on a running instance).
secure_load() { [[ -s $SECURE_DIR/users.json ]] && secure_load_users; }

secure_broker_conf() {
    cat <<EOF
# ACL 2.0 (AuthConfig): users and ACLs kept by the broker under store/config.
authenticationEnabled=true
authenticationProvider=$AUTHN_PROVIDER
authenticationMetadataProvider=org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider
authorizationEnabled=true
authorizationProvider=$AUTHZ_PROVIDER
authorizationMetadataProvider=org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider
initAuthenticationUser={"username":"${SECURE_USER[admin]}","password":"${SECURE_SECRET[admin]}"}
innerClientAuthenticationCredentials={"accessKey":"${SECURE_USER[inner]}","secretKey":"${SECURE_SECRET[inner]}"}
EOF
}

secure_proxy_json() { # the extra keys of rmq-proxy.json (each line ends with a comma)
    cat <<EOF
  "tlsTestModeEnable": false,
  "tlsCertPath": "$SECURE_DIR/server.pem",
  "tlsKeyPath": "$SECURE_DIR/server.key",
  "authenticationEnabled": true,
  "authenticationProvider": "$AUTHN_PROVIDER",
  "authenticationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider",
  "authorizationEnabled": true,
  "authorizationProvider": "$AUTHZ_PROVIDER",
  "authorizationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthorizationMetadataProvider",
  "innerClientAuthenticationCredentials": "{\\"accessKey\\":\\"${SECURE_USER[inner]}\\",\\"secretKey\\":\\"${SECURE_SECRET[inner]}\\"}",
EOF
}

# JVM options: the remoting servers' certificate (TlsSystemConfig); the proxy JVM also enforces
# TLS (tls.server.mode is process-wide: gRPC, the proxy's remoting port and the broker's ports).
secure_server_jvm_args() { # namesrv|proxy
    printf '%s\n' -Dtls.test.mode.enable=false "-Dtls.server.certPath=$SECURE_DIR/server.pem" \
        "-Dtls.server.keyPath=$SECURE_DIR/server.key"
    if [[ $1 == proxy ]]; then
        printf '%s\n' -Dtls.server.mode=enforcing
    else
        printf '%s\n' -Dtls.server.mode=permissive
    fi
}

# Admin clients (FerryAdmin, mqadmin): TLS to the broker and name server, verifying our CA.
secure_client_jvm_args() {
    printf '%s\n' -Dtls.enable=true -Dtls.test.mode.enable=false -Dtls.client.authServer=true \
        "-Dtls.client.trustCertPath=$SECURE_DIR/ca.pem"
}

# FerryAdmin ops that create the Normal users and their ACLs (passwords travel in the
# environment, see secure_admin_env).
secure_admin_ops() {
    local role spec
    for role in client limited; do
        printf '%s\n' user "${SECURE_USER[$role]}" Normal
    done
    for spec in "${SECURE_ACLS[@]}"; do
        read -r role resource actions <<<"$spec"
        printf '%s\n' acl "${SECURE_USER[$role]}" "$resource" "$actions" Allow
    done
}

secure_admin_env() { # NAME=VALUE lines for `env`: the admin's credentials and the users' passwords
    local role var
    printf '%s\n' "FERRYMQ_ADMIN_ACCESS_KEY=${SECURE_USER[admin]}" "FERRYMQ_ADMIN_SECRET_KEY=${SECURE_SECRET[admin]}"
    for role in client limited; do
        var=${SECURE_USER[$role]^^}
        printf '%s\n' "FERRYMQ_PASSWORD_${var//[^A-Z0-9]/_}=${SECURE_SECRET[$role]}"
    done
}
