-- Sets the status of an upload (by its collection and key).
CREATE OR REPLACE FUNCTION jobhost_mark_file(p_collection text, p_key text, p_status text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
BEGIN
    UPDATE jobhost_files SET status = p_status
    WHERE collection = p_collection AND object_key = p_key AND status = 'pending';
    RETURN FOUND;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_mark_file(TEXT, TEXT, TEXT) FROM PUBLIC;
