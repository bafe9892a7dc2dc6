# The bucket as untrusted input (issue 39), against moto on 127.0.0.1: sourced by .ci/run's
# backup step, which sets bin, work, port, id_file, rcpt, s3py and the AWS_* variables.
# Each case names what it checks; timeouts are 2 s here (CAPSTAN_BACKUP_TIMEOUT).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
fail() { echo "backup-hostile: $*" >&2; exit 1; }
rss() { grep -o 'peak-rss-mib [0-9]*' "$1" | awk '{print $2}'; }
s3py "s3.create_bucket(Bucket='capstan-hostile')"
H=s3://capstan-hostile/mgmt

# The format: `age -d | tar x` restores without capstan, and the manifest checks the files.
id=$($bin backup push "$mv_dir" $H -r "$rcpt")
s3py "open(sys.argv[2], 'wb').write(s3.get_object(Bucket='capstan-hostile', Key='mgmt/' + sys.argv[1] + '.age')['Body'].read())" "$id" "$work/h.age"
mkdir "$work/untar" && (cd "$work/untar" && age -d -i "$OLDPWD/$id_file" "$work/h.age" | tar x)
diff -r "$mv_dir" "$work/untar/move"
(cd "$work/untar/move" && jq -r '.files[] | "\(.sha256)  \(.name)"' ../manifest.json | sha256sum -c --quiet)
[ "$(jq -r .id "$work/untar/manifest.json")" = "$id" ]
echo "age -d | tar x restores the backup; sha256sum -c of the manifest passes"

# Hostile listing: a control-character key, a future-dated index (with its object), an index
# whose time is not its id's, a nested prefix. Each is skipped (reported escaped, the nested
# prefix not at all) and the real backup is still listed and pulled.
s3py "
import json, sys
s3.put_object(Bucket='capstan-hostile', Key='mgmt/\x1b[31mevil\x07.json', Body=b'{}')
real = json.loads(s3.get_object(Bucket='capstan-hostile', Key='mgmt/' + sys.argv[1] + '.json')['Body'].read())
for fid, created in (('20991231T235959Z-00000000', '2099-12-31T23:59:59Z'), ('20991230T000000Z-00000001', '2026-01-01T00:00:00Z')):
    body = s3.get_object(Bucket='capstan-hostile', Key='mgmt/' + sys.argv[1] + '.age')['Body'].read()
    s3.put_object(Bucket='capstan-hostile', Key='mgmt/' + fid + '.age', Body=body)
    s3.put_object(Bucket='capstan-hostile', Key='mgmt/' + fid + '.json', Body=json.dumps(dict(real, id=fid, created=created)))
s3.put_object(Bucket='capstan-hostile', Key='mgmt/old/20991231T235959Z-00000002.json', Body=b'not json')
s3.put_object(Bucket='capstan-hostile', Key='mgmt/old/20991231T235959Z-00000002.age', Body=b'x')
" "$id"
$bin backup list $H >"$work/hl.out" 2>"$work/hl.err"
head -1 "$work/hl.out" | grep -q "^$id "
[ "$(wc -l <"$work/hl.out")" = 1 ] || fail "list: more than the real backup"
grep -q 'skipped: \\x1b\[31mevil\\x07.json\|skipped: .*evil.*control characters' "$work/hl.err"
! grep -q $'\x1b' "$work/hl.err"
grep -q 'skipped: 20991231T235959Z-00000000.json: dated 2099-12-31T23:59:59Z, more than 5 minutes after' "$work/hl.err"
grep -q "skipped: 20991230T000000Z-00000001.json: its time 2026-01-01T00:00:00Z is not its id's" "$work/hl.err"
! grep -q 'old' "$work/hl.err"
$bin backup pull $H "$work/hp" -i "$id_file" 2>"$work/hp.err"
diff -r "$mv_dir" "$work/hp"
! ls -A "$work/hp" | grep -q $'[\x01-\x1f]'
echo "control-character key, future-dated and misdated indexes skipped and reported escaped; nested prefix not listed; the real backup pulled"

# A stalled endpoint (accepts, never answers): a clear error naming it, in seconds.
stall_port=$(free_port)
python3 .ci/slow-proxy.py stall "$stall_port" "$port" >"$work/stall.log" & stall_pid=$!
sleep 0.5
set +e
s0=$(date +%s)
CAPSTAN_BACKUP_TIMEOUT=2 AWS_ENDPOINT_URL="http://127.0.0.1:$stall_port" timeout 120 $bin backup list $H 2>"$work/stall.err"; c=$?
s1=$(date +%s)
set -e
cat "$work/stall.err"
[ "$c" = 2 ] && [ $((s1 - s0)) -lt 30 ] && grep -q "http://127.0.0.1:$stall_port" "$work/stall.err" && grep -q 'CAPSTAN_BACKUP_TIMEOUT' "$work/stall.err" || fail "[ 'c' = 2 ] && [ ((s1 - s0)) -lt 30 ] && grep -q 'http://127.0.0.1:stall_port' '"
# No credentials: refused before any request (no instance-metadata probe, nothing sent).
n0=$(grep -c accepted "$work/stall.log" || true)
set +e
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL="http://127.0.0.1:$stall_port" timeout 60 $bin backup list $H 2>"$work/nocred.err"; c=$?
set -e
n1=$(grep -c accepted "$work/stall.log" || true)
kill $stall_pid
[ "$c" = 2 ] && [ "$n0" = "$n1" ] && grep -q 'AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY' "$work/nocred.err" && grep -q 'AWS_EC2_METADATA_DISABLED=false' "$work/nocred.err" || fail "[ 'c' = 2 ] && [ 'n0' = 'n1' ] && grep -q 'AWS_ACCESS_KEY_ID and AWS_SECRET_ACCE"
# A missing bucket: named, with how to create it.
set +e
$bin backup list s3://capstan-no-such-bucket/x 2>"$work/nobucket.err"; c=$?
set -e
[ "$c" = 2 ] && grep -q 'the bucket `capstan-no-such-bucket` does not exist at http://127.0.0.1' "$work/nobucket.err" && grep -q 'aws s3 mb s3://capstan-no-such-bucket' "$work/nobucket.err" || fail "[ 'c' = 2 ] && grep -q 'the bucket `capstan-no-such-bucket` does not exist at ht"
echo "stalled endpoint: exit 2 in $((s1 - s0)) s naming it; no credentials: refused with no connection; missing bucket named"

# A download that stops mid-body, and one that trickles 1 byte a second: a clear error in
# seconds, and no decrypted file or staging directory left beside OUT (a 2 MiB backup).
mid="$work/mid"; mkdir -p "$mid"; cp "$mv_dir"/* "$mid/"
head -c $((2 * 1024 * 1024)) /dev/urandom | base64 -w0 >"$mid/ConfigMap_lab-f_blob.yaml"
mid_id=$($bin backup push "$mid" $H-mid -r "$rcpt")
for mode in midbody trickle; do
  p=$(free_port)
  python3 .ci/slow-proxy.py $mode "$p" "$port" >/dev/null & proxy_pid=$!
  sleep 0.5
  set +e
  s0=$(date +%s)
  CAPSTAN_BACKUP_TIMEOUT=2 AWS_ENDPOINT_URL="http://127.0.0.1:$p" timeout 120 $bin backup pull $H-mid/$mid_id "$work/slow-$mode" -i "$id_file" 2>"$work/$mode.err"; c=$?
  s1=$(date +%s)
  set -e
  kill $proxy_pid
  cat "$work/$mode.err"
  [ "$c" = 2 ] && [ $((s1 - s0)) -lt 40 ] && [ ! -e "$work/slow-$mode" ] && ! ls -A "$work" | grep -q "capstan-new" || fail "[ 'c' = 2 ] && [ ((s1 - s0)) -lt 40 ] && [ ! -e 'work/slow-mode' ] && ! ls -A 'w"
  echo "$mode: exit $c in $((s1 - s0)) s, nothing left beside OUT"
done
grep -q 'sent nothing for 2 s (downloading' "$work/midbody.err" || fail "midbody: no stall message"
grep -q 'the endpoint trickles' "$work/trickle.err" || fail "trickle: no trickle message"

# 1,000 indexes in a prefix, each of 200 KB (a cluster list): `list` reads one at a time.
s3py "
import json, sys
real = json.loads(s3.get_object(Bucket='capstan-hostile', Key='mgmt/' + sys.argv[1] + '.json')['Body'].read())
for i in range(1000):
    fid = '20250101T%02d%02d%02dZ-%08x' % (i // 3600, i // 60 % 60, i % 60, i)
    created = '2025-01-01T%02d:%02d:%02dZ' % (i // 3600, i // 60 % 60, i % 60)
    s3.put_object(Bucket='capstan-hostile', Key='many/' + fid + '.age', Body=b'x' * 10)
    s3.put_object(Bucket='capstan-hostile', Key='many/' + fid + '.json', Body=json.dumps(dict(real, id=fid, created=created, size=10, clusters=['ns-%d/c-%d' % (i, j) for j in range(12000)])))
" "$id"
python3 .ci/peak-rss.py $bin backup list s3://capstan-hostile/many >"$work/many.out" 2>"$work/many.err"
[ "$(wc -l <"$work/many.out")" = 1000 ] || fail "1,000 indexes: not all listed"
many_rss=$(rss "$work/many.err")
[ "$many_rss" -lt 64 ] || { echo "backup list of 1,000 indexes: peak RSS $many_rss MiB"; exit 1; }
echo "1,000 indexes of 200 KB listed: peak RSS $many_rss MiB"

# A 1 GiB backup (63 files of 16 MiB and the three small ones): push and pull stream, peak
# RSS bounded by twice the largest file and a fixed buffer.
gib="$work/gib"; mkdir -p "$gib"; cp "$mv_dir"/* "$gib/"
head -c $((12 * 1024 * 1024 - 3)) /dev/urandom | base64 -w0 >"$work/blob"
for i in $(seq -w 1 63); do cp "$work/blob" "$gib/ConfigMap_lab-f_blob-$i.yaml"; printf '%s' "$i" >>"$gib/ConfigMap_lab-f_blob-$i.yaml"; done
rm -f "$work/blob"
python3 .ci/peak-rss.py $bin backup push "$gib" s3://capstan-hostile/gib -r "$rcpt" >"$work/gib.id" 2>"$work/gib-push.err"
push_rss=$(rss "$work/gib-push.err")
python3 .ci/peak-rss.py $bin backup pull s3://capstan-hostile/gib "$work/gib-out" -i "$id_file" 2>"$work/gib-pull.err"
pull_rss=$(rss "$work/gib-pull.err")
diff -r "$gib" "$work/gib-out"
rm -rf "$gib" "$work/gib-out"
echo "1 GiB backup: push peak RSS $push_rss MiB, pull $pull_rss MiB (largest file 16 MiB)"
[ "$push_rss" -lt 100 ] && [ "$pull_rss" -lt 100 ] || fail "[ 'push_rss' -lt 100 ] && [ 'pull_rss' -lt 100 ]"
